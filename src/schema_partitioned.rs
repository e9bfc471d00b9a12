//! The partitioned tables, which `diesel print-schema` cannot print (src/schema.rs): the event
//! log `callback_deliveries` is partitioned by month of receipt (migration 000054) and has no
//! primary key, since one would have to include `received_at` and add a unique index to every
//! partition, on the callback path. diesel.toml's `[print_schema] filter` leaves it and its
//! monthly partitions out; this declaration stands in for it, and
//! `diesel_cli::the_partitioned_event_log_is_declared_as_print_schema_would_print_it` compares
//! its columns with what print-schema prints for the table.

diesel::table! {
    /// `id` is unique (one sequence) though no constraint says so across partitions.
    callback_deliveries (id) {
        id -> Int8,
        merchant_id -> Int8,
        provider -> Text,
        event_id -> Text,
        body -> Bytea,
        received_at -> Timestamptz,
        event_type -> Nullable<Text>,
        outcome -> Nullable<Text>,
        reason -> Nullable<Text>,
        ack_status -> Nullable<Int4>,
        transfer_id -> Nullable<Int8>,
        trace_id -> Nullable<Text>,
    }
}

// The tables the event log's reads join it with (src/deliveries/read.rs); print-schema's own
// list in schema.rs names every other pair.
diesel::allow_tables_to_appear_in_same_query!(callback_deliveries, idempotency_keys);
diesel::allow_tables_to_appear_in_same_query!(callback_deliveries, ledger_entries);
diesel::allow_tables_to_appear_in_same_query!(callback_deliveries, ledger_transfers);
diesel::allow_tables_to_appear_in_same_query!(callback_deliveries, orders);
diesel::allow_tables_to_appear_in_same_query!(callback_deliveries, payments);

use crate::schema::{idempotency_keys, ledger_entries, ledger_transfers, orders, payments};
