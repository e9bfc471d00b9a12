//! An ack is sent only for a commit that happened. The one-statement capture runs outside an
//! explicit transaction: PostgreSQL sends its row, then commits the implicit transaction when
//! the client's Sync arrives, and a commit can still fail there (a deferred constraint, a
//! backend terminated between the two). A deferred constraint trigger that refuses every new
//! transfer at commit makes that failure happen on every capture.

use crate::support::simulator::Event;
use crate::support::{ACME, answer, insert_orders, spawn_app};

#[tokio::test]
async fn a_capture_whose_commit_fails_after_its_row_is_never_acknowledged() {
    let app = spawn_app().await;
    let orders = insert_orders(&app.db, 1).await;
    let (order_id, amount) = orders[0];
    app.db
        .batch_execute(
            "CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'refused at commit'; END $$; \
             CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON ledger_transfers \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit();",
        )
        .await
        .unwrap();
    let event = Event::payment("evt_commit_fails", order_id, amount);

    let (status, _, body) = answer(app.deliver(ACME, &event.id, &event.body).await).await;

    let transfers: i64 = app
        .db
        .query_one("SELECT count(*) FROM ledger_transfers", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(transfers, 0, "the commit failed: nothing is in the books");
    assert!(
        !(200..300).contains(&status),
        "nothing committed, so no 2xx: {status} {body}"
    );
    // The provider's retry, once the commit can succeed, is a first delivery.
    app.db
        .batch_execute("DROP TRIGGER refuse_at_commit ON ledger_transfers")
        .await
        .unwrap();
    let (status, _, body) = answer(app.deliver(ACME, &event.id, &event.body).await).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"applied\""), "{body}");
}
