//! diesel CLI as the README promises it: `diesel migration run`, `diesel migration redo --all`
//! and `diesel print-schema` work on a fresh database with the project's `diesel.toml`, and
//! leave `src/schema.rs` as it is checked in (the event log's monthly partitions are data,
//! never tables of it). The commands run in a copy of the project's files, so a test run never
//! rewrites the checkout's `src/schema.rs`. scripts/test installs diesel CLI when it is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::empty_database;

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The `diesel` binary: `$DIESEL`, `diesel` on PATH, or cargo's install folder.
fn diesel() -> PathBuf {
    if let Some(path) = std::env::var_os("DIESEL") {
        return PathBuf::from(path);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("diesel"))
            .find(|candidate| candidate.is_file())
    });
    let in_cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .map(|home| home.join("bin/diesel"))
        .filter(|candidate| candidate.is_file());
    on_path.or(in_cargo_home).unwrap_or_else(|| {
        panic!(
            "diesel CLI is not installed (scripts/test installs it): \
             cargo install diesel_cli --no-default-features --features postgres --locked"
        )
    })
}

/// A copy of what diesel CLI reads and writes: Cargo.toml (how it finds the project's root),
/// diesel.toml, migrations/ and src/schema.rs.
struct Project(PathBuf);

impl Project {
    fn copy() -> Self {
        let dir = std::env::temp_dir().join(format!("cg-diesel-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(dir.join("src")).unwrap();
        for file in ["Cargo.toml", "diesel.toml", "src/schema.rs"] {
            std::fs::copy(Path::new(REPO).join(file), dir.join(file)).unwrap();
        }
        copy_tree(&Path::new(REPO).join("migrations"), &dir.join("migrations"));
        Self(dir)
    }

    fn diesel(&self, args: &[&str], database_url: &str) -> Output {
        Command::new(diesel())
            .args(args)
            .arg("--database-url")
            .arg(database_url)
            .current_dir(&self.0)
            .env_remove("DATABASE_URL")
            .env_remove("DIESEL_CONFIG_FILE")
            .output()
            .unwrap()
    }

    fn schema_rs(&self) -> String {
        std::fs::read_to_string(self.0.join("src/schema.rs")).unwrap()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

fn succeeded(what: &str, output: &Output) {
    assert!(
        output.status.success(),
        "`diesel {what}` failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn checked_in_schema_rs() -> String {
    std::fs::read_to_string(Path::new(REPO).join("src/schema.rs")).unwrap()
}

#[tokio::test]
async fn diesel_cli_runs_redoes_and_prints_the_schema_and_leaves_schema_rs_unchanged() {
    let url = empty_database().await;
    let project = Project::copy();
    let checked_in = checked_in_schema_rs();

    succeeded(
        "migration run",
        &project.diesel(&["migration", "run"], &url),
    );
    assert!(
        project.schema_rs() == checked_in,
        "`diesel migration run` rewrote src/schema.rs: it is not what print-schema prints for \
         the migrated database; regenerate it with diesel print-schema and commit it"
    );

    succeeded(
        "migration redo --all",
        &project.diesel(&["migration", "redo", "--all"], &url),
    );
    assert!(
        project.schema_rs() == checked_in,
        "`diesel migration redo --all` left another src/schema.rs"
    );

    let printed = project.diesel(&["print-schema"], &url);
    succeeded("print-schema", &printed);
    let printed = String::from_utf8(printed.stdout).unwrap();
    assert!(
        printed == checked_in,
        "`diesel print-schema` prints another schema than src/schema.rs"
    );
    for line in printed.lines() {
        assert!(
            !(line.contains("callback_deliveries_y")
                || line.contains("callback_deliveries_legacy")),
            "a partition of the event log is in src/schema.rs: {line}"
        );
    }
}

/// The lines of `text` that declare a column of `table` in its `table!` block.
fn columns_of(text: &str, table: &str) -> Vec<String> {
    text.lines()
        .skip_while(|line| !line.trim_start().starts_with(&format!("{table} (")))
        .skip(1)
        .take_while(|line| line.trim() != "}")
        .filter(|line| line.contains("->"))
        .map(|line| line.trim().to_owned())
        .collect()
}

/// src/schema_partitioned.rs declares the event log by hand, since print-schema refuses a table
/// without a primary key. Here a plain copy of the table (its columns, `LIKE` it) gets one in a
/// scratch database, so print-schema prints it: its columns must be the declared ones, so a
/// migration that changes the log's columns without the declaration fails here.
#[tokio::test]
async fn the_partitioned_event_log_is_declared_as_print_schema_would_print_it() {
    let url = empty_database().await;
    callback_gateway::db::run_migrations(&url).await.unwrap();
    let client = crate::support::connect(&url).await;
    client
        .batch_execute(
            "CREATE TABLE callback_deliveries_columns (LIKE callback_deliveries, PRIMARY KEY (id))",
        )
        .await
        .unwrap();
    let project = Project::copy();
    // The project's settings without the filter that leaves the log out.
    let unfiltered: String = std::fs::read_to_string(Path::new(REPO).join("diesel.toml"))
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("filter"))
        .map(|line| format!("{line}\n"))
        .collect();
    std::fs::write(project.0.join("diesel.toml"), unfiltered).unwrap();
    let printed = project.diesel(
        &[
            "print-schema",
            "--only-tables",
            "^callback_deliveries_columns$",
        ],
        &url,
    );
    succeeded(
        "print-schema --only-tables callback_deliveries_columns",
        &printed,
    );
    let printed = String::from_utf8(printed.stdout).unwrap();
    let declared =
        std::fs::read_to_string(Path::new(REPO).join("src/schema_partitioned.rs")).unwrap();
    let expected = columns_of(&printed, "callback_deliveries_columns");
    assert!(
        expected.len() >= 10,
        "print-schema printed the event log's columns:\n{printed}"
    );
    assert_eq!(
        columns_of(&declared, "callback_deliveries"),
        expected,
        "src/schema_partitioned.rs does not declare the columns print-schema prints"
    );
}
