// @generated automatically by Diesel CLI.

diesel::table! {
    api_tokens (id) {
        id -> Int8,
        user_id -> Int8,
        token_sha256 -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    audit_log (id) {
        id -> Int8,
        at -> Timestamptz,
        actor -> Text,
        role -> Text,
        action -> Text,
        target -> Nullable<Text>,
        request_id -> Nullable<Text>,
        outcome -> Text,
        changes -> Jsonb,
        prev_hash -> Text,
        row_hash -> Text,
    }
}

diesel::table! {
    audit_log_chain (only_row) {
        only_row -> Bool,
        last_id -> Int8,
        last_hash -> Text,
    }
}

diesel::table! {
    callback_minute_counts (minute, outcome) {
        minute -> Int8,
        outcome -> Text,
        count -> Int8,
    }
}

diesel::table! {
    callback_minute_state (singleton) {
        singleton -> Bool,
        through_delivery_id -> Int8,
        pending_delivery_id -> Nullable<Int8>,
        pending_writers -> Nullable<Array<Nullable<Text>>>,
    }
}

diesel::table! {
    idempotency_keys (id) {
        id -> Int8,
        user_id -> Int8,
        op -> Text,
        idem_key -> Text,
        request_hash -> Text,
        status -> Text,
        response_status -> Nullable<Int4>,
        response_body -> Nullable<Jsonb>,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        locked_until -> Nullable<Timestamptz>,
        lease_token -> Nullable<Text>,
    }
}

diesel::table! {
    ledger_balance_checkpoints (merchant_id) {
        merchant_id -> Int8,
        through_entry_id -> Int8,
        balances -> Jsonb,
        taken_at -> Timestamptz,
    }
}

diesel::table! {
    ledger_checkpoint_state (singleton) {
        singleton -> Bool,
        through_entry_id -> Int8,
        pending_entry_id -> Nullable<Int8>,
        pending_writers -> Nullable<Array<Nullable<Text>>>,
    }
}

diesel::table! {
    ledger_entries (id) {
        id -> Int8,
        transfer_id -> Int8,
        merchant_id -> Int8,
        account -> Text,
        currency -> Text,
        amount_minor -> Int8,
    }
}

diesel::table! {
    ledger_transfers (id) {
        id -> Int8,
        merchant_id -> Int8,
        provider -> Text,
        event_id -> Text,
        kind -> Text,
        order_id -> Nullable<Int8>,
        payment_id -> Text,
        created_at -> Timestamptz,
        refund_id -> Nullable<Text>,
        dispute_id -> Nullable<Text>,
    }
}

diesel::table! {
    merchant_notifications (id) {
        id -> Int8,
        merchant_id -> Int8,
        kind -> Text,
        order_id -> Nullable<Int8>,
        object_status -> Text,
        reference -> Nullable<Text>,
        amount_minor -> Nullable<Int8>,
        currency -> Nullable<Text>,
        provider -> Nullable<Text>,
        event_id -> Nullable<Text>,
        transfer_id -> Nullable<Int8>,
        payment_id -> Nullable<Text>,
        refund_request_id -> Nullable<Int8>,
        detail -> Nullable<Text>,
        dispute_id -> Nullable<Text>,
        created_at -> Timestamptz,
        status -> Text,
        attempts -> Int4,
        next_attempt_at -> Timestamptz,
        last_attempt_at -> Nullable<Timestamptz>,
        last_status -> Nullable<Int4>,
        last_error -> Nullable<Text>,
        delivered_at -> Nullable<Timestamptz>,
        endpoint_id -> Text,
    }
}

diesel::table! {
    notification_attempts (id) {
        id -> Int8,
        notification_id -> Int8,
        attempt -> Int4,
        finished_at -> Timestamptz,
        status_code -> Nullable<Int4>,
        error -> Nullable<Text>,
    }
}

diesel::table! {
    notification_endpoints (merchant_id, endpoint_id) {
        merchant_id -> Int8,
        disabled_at -> Nullable<Timestamptz>,
        disabled_reason -> Nullable<Text>,
        failing_since -> Nullable<Timestamptz>,
        last_success_at -> Nullable<Timestamptz>,
        last_failure_at -> Nullable<Timestamptz>,
        last_error -> Nullable<Text>,
        dropped -> Int8,
        last_dropped_at -> Nullable<Timestamptz>,
        endpoint_id -> Text,
    }
}

diesel::table! {
    operators (id) {
        id -> Int8,
        name -> Text,
        role -> Text,
        key_sha256 -> Text,
        created_at -> Timestamptz,
        expires_at -> Nullable<Timestamptz>,
        revoked_at -> Nullable<Timestamptz>,
        last_used_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    orders (id) {
        id -> Int8,
        user_id -> Int8,
        amount_minor -> Int8,
        currency -> Text,
        reference -> Nullable<Text>,
        status -> Text,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    payment_disputes (id) {
        id -> Int8,
        merchant_id -> Int8,
        provider -> Text,
        dispute_id -> Text,
        payment_id -> Text,
        order_id -> Nullable<Int8>,
        funds -> Text,
        outcome -> Text,
        currency -> Text,
        withdrawn_minor -> Int8,
        fee_minor -> Int8,
        reinstated_minor -> Int8,
        account -> Nullable<Text>,
        note -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        reinstated_by -> Nullable<Text>,
    }
}

diesel::table! {
    payments (id) {
        id -> Int8,
        merchant_id -> Int8,
        provider -> Text,
        payment_id -> Text,
        order_id -> Nullable<Int8>,
        status -> Text,
        amount_minor -> Int8,
        currency -> Text,
        refunded_minor -> Int8,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        disputed_minor -> Int8,
    }
}

diesel::table! {
    payouts (merchant_id, provider, payout_id) {
        merchant_id -> Int8,
        provider -> Text,
        payout_id -> Text,
        status -> Text,
        amount_minor -> Int8,
        currency -> Text,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
    }
}

diesel::table! {
    portal_links (link_hash) {
        link_hash -> Bytea,
        merchant_id -> Int8,
        created_by -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
        opened_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    portal_sessions (session_hash) {
        session_hash -> Bytea,
        merchant_id -> Int8,
        csrf -> Text,
        created_by -> Text,
        created_at -> Timestamptz,
        expires_at -> Timestamptz,
    }
}

diesel::table! {
    provider_transmissions (provider, transmission_id) {
        provider -> Text,
        transmission_id -> Text,
        merchant_id -> Int8,
        body_sha256 -> Text,
        event_id -> Text,
        valid_until -> Timestamptz,
        first_seen_at -> Timestamptz,
        conflicts -> Int4,
        last_conflict_at -> Nullable<Timestamptz>,
        last_conflict_sha256 -> Nullable<Text>,
        last_conflict_event_id -> Nullable<Text>,
    }
}

diesel::table! {
    refund_requests (id) {
        id -> Int8,
        merchant_id -> Int8,
        order_id -> Int8,
        provider -> Text,
        payment_id -> Text,
        amount_minor -> Int8,
        currency -> Text,
        reason -> Nullable<Text>,
        status -> Text,
        provider_idempotency_key -> Text,
        provider_refund_id -> Nullable<Text>,
        failure_message -> Nullable<Text>,
        idempotency_record_id -> Nullable<Int8>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        attempts -> Int4,
        next_attempt_at -> Timestamptz,
        review_reason -> Nullable<Text>,
    }
}

diesel::table! {
    settlement_payouts (merchant_id, provider, payout_id) {
        merchant_id -> Int8,
        provider -> Text,
        payout_id -> Text,
        state -> Text,
        currency -> Text,
        report_minor -> Numeric,
        stated_minor -> Nullable<Numeric>,
        ledger_minor -> Nullable<Numeric>,
        lines -> Int8,
        differing_items -> Int8,
        differences -> Jsonb,
        bank -> Nullable<Text>,
        report_file -> Text,
        settled_at -> Timestamptz,
    }
}

diesel::table! {
    webhook_endpoint_revision (singleton) {
        singleton -> Bool,
        revision -> Int8,
    }
}

diesel::table! {
    webhook_endpoints (id) {
        id -> Text,
        merchant_id -> Int8,
        url -> Text,
        description -> Text,
        secret_sealed -> Bytea,
        previous_secret_sealed -> Nullable<Bytea>,
        previous_secret_until -> Nullable<Timestamptz>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        filter_types -> Array<Nullable<Text>>,
        rate_limit_per_sec -> Nullable<Int4>,
    }
}

diesel::joinable!(ledger_entries -> ledger_transfers (transfer_id));
diesel::joinable!(notification_attempts -> merchant_notifications (notification_id));
diesel::joinable!(refund_requests -> idempotency_keys (idempotency_record_id));
diesel::joinable!(refund_requests -> orders (order_id));

diesel::allow_tables_to_appear_in_same_query!(
    api_tokens,
    audit_log,
    audit_log_chain,
    callback_minute_counts,
    callback_minute_state,
    idempotency_keys,
    ledger_balance_checkpoints,
    ledger_checkpoint_state,
    ledger_entries,
    ledger_transfers,
    merchant_notifications,
    notification_attempts,
    notification_endpoints,
    operators,
    orders,
    payment_disputes,
    payments,
    payouts,
    portal_links,
    portal_sessions,
    provider_transmissions,
    refund_requests,
    settlement_payouts,
    webhook_endpoint_revision,
    webhook_endpoints,
);
