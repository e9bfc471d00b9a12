//! The trace layer without span entries and exits. An instrumented future enters and leaves its
//! span on every poll, and every span around it with it; tracing-opentelemetry answers each
//! exit with a registry lookup, a lock and a clock read, only to move the span's end time to
//! the latest exit. Spans here end when they close instead (an instrumented future's span
//! closes as the future completes; the request's when its answer has been handed over), so the
//! entries and exits are not passed on. The registry still keeps the current span for every
//! layer, so which trace a new span joins is unchanged. Measured in docs/performance.md
//! (session 14).

use std::any::TypeId;

use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use tracing::level_filters::LevelFilter;

/// `inner` with every call but `on_enter` and `on_exit`.
pub(super) struct OpenClose<L>(pub(super) L);

impl<S: Subscriber, L: Layer<S>> Layer<S> for OpenClose<L> {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.0.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.0.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.0.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.0.enabled(metadata, ctx)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.0.on_new_span(attrs, id, ctx);
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        self.0.on_record(span, values, ctx);
    }

    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.0.on_follows_from(span, follows, ctx);
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.0.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        self.0.on_event(event, ctx);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        self.0.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.0.on_id_change(old, new, ctx);
    }

    // The subscriber finds the OpenTelemetry layer (a span's context, `OpenTelemetrySpanExt`)
    // and the per-layer filter's marker through this; the wrapper must not hide them.
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: forwarded unchanged; the inner layer answers for its own types.
        unsafe { self.0.downcast_raw(id) }
    }
}
