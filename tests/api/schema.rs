//! docs/schema.sql is today's schema: what every migration leaves, dumped and normalised by
//! `scripts/schema`. A migration that changes the schema without the file regenerated fails
//! here, so a reviewer can read a routine change as a diff of that file.

use std::path::Path;
use std::process::Command;

use callback_gateway::db;

use crate::support::{connect, empty_database};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// `scripts/schema --dump`'s normalised schema of the database at `url`.
fn dump(url: &str) -> String {
    let output = Command::new("bash")
        .arg(Path::new(REPO).join("scripts/schema"))
        .args(["--dump", url])
        .output()
        .expect("scripts/schema runs");
    assert!(
        output.status.success(),
        "scripts/schema --dump failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("the dump is UTF-8")
}

/// The lines of `a` and `b` that differ, first few, for a message a person can act on.
fn first_differences(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let mut out = Vec::new();
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i).copied(), b.get(i).copied());
        if x != y {
            out.push(format!(
                "line {}:\n  docs/schema.sql: {}\n  migrations:      {}",
                i + 1,
                x.unwrap_or("<end of file>"),
                y.unwrap_or("<end of file>")
            ));
            if out.len() == 5 {
                break;
            }
        }
    }
    out.join("\n")
}

#[tokio::test]
async fn docs_schema_sql_is_what_the_migrations_leave() {
    let url = empty_database().await;
    db::run_migrations(&url).await.unwrap();

    let checked_in = std::fs::read_to_string(Path::new(REPO).join("docs/schema.sql"))
        .expect("docs/schema.sql exists");
    let migrated = dump(&url);
    assert!(
        checked_in == migrated,
        "docs/schema.sql is not the schema the migrations leave: run scripts/schema and commit \
         docs/schema.sql with the migration\n{}",
        first_differences(&checked_in, &migrated)
    );
    // What the file is for: every write routine's whole current body is in it.
    for routine in [
        "FUNCTION public.payment_apply_all(",
        "FUNCTION public.notifications_stage(",
        "FUNCTION public.payment_disputes_write(",
    ] {
        assert!(migrated.contains(routine), "{routine} is in the dump");
    }
}

/// The comparison sees a routine's body, not only its name: a migration that replaces one
/// (here by hand, as a migration would) changes the dump.
#[tokio::test]
async fn a_replaced_routine_body_changes_the_dump() {
    let url = empty_database().await;
    db::run_migrations(&url).await.unwrap();
    let before = dump(&url);

    let client = connect(&url).await;
    let definition: String = client
        .query_one(
            "SELECT pg_get_functiondef('public.callback_record_delivery'::regproc)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    // The same routine with one more comment line in its body.
    let replaced = definition.replacen("BEGIN", "BEGIN\n  -- changed by a migration", 1);
    assert_ne!(replaced, definition, "the routine has a BEGIN to change");
    client.batch_execute(&replaced).await.unwrap();

    let after = dump(&url);
    assert_ne!(before, after);
    assert!(after.contains("-- changed by a migration"));
    assert!(!before.contains("-- changed by a migration"));
}
