//! `payment.callback`: a verified provider event parsed once ([`event`]), planned against
//! the state the database holds ([`state`]), and written as that plan's [`effect`] through the
//! guarded routines every path shares ([`apply`] on the general path, [`capture`] and
//! [`batcher`] for the one-statement first delivery of a capture), and logged with its outcome
//! ([`delivery`]).

pub mod ack;
pub mod apply;
pub mod batcher;
pub mod callback;
pub mod capture;
pub mod delivery;
pub mod dispute;
pub mod effect;
pub mod event;
pub mod model;
pub mod reader;
pub mod snapshot;
pub mod state;
