//! The `callback-gateway` command line. Exit codes: 0 success, 1 runtime failure,
//! 2 usage or configuration error (with a one-line reason).

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::access::operator;
use crate::access::role::Role;
pub use crate::command::CommandError;
use crate::config::{ConfigError, ProcessEnv, Settings};
use crate::export::{self, ExportArgs};
use crate::idempotency::{cleanup, transmission};
use crate::notifications::retention;
use crate::reconcile::{self, ReconcileArgs};
use crate::replay::{self, ReplayArgs};
use crate::secret::shown_url;
use crate::settlement::{self, SettleArgs};
use crate::test_event::{self, SendTestEventArgs};
use crate::{auth, db, preflight};

#[derive(Debug, Parser)]
#[command(name = "callback-gateway", version, about = "Payment-callback gateway")]
pub struct Cli {
    /// Configuration file (default: gateway.toml in the working directory, if present).
    #[arg(long, global = true, env = "GATEWAY_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the HTTP server, the expiry cleaner and the refund recoverer (migrations first).
    Serve {
        /// Do not apply pending migrations at startup.
        #[arg(long)]
        no_migrate: bool,
    },
    /// Apply pending migrations and exit.
    Migrate,
    /// Delete expired idempotency records and delivered notifications past their retention
    /// (one full pass each) and print how many.
    Cleanup,
    /// Manage API tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Manage operator keys: one per person, with one role (docs/access.md).
    Operator {
        #[command(subcommand)]
        command: OperatorCommand,
    },
    /// The audit log (docs/access.md#tamper-evidence).
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// After a point-in-time restore, before serving: move every id sequence past the ids the
    /// lost timeline handed out, so none is handed out twice (docs/backup.md). As the schema's
    /// owner.
    AfterRestore {
        /// How far past its restored value each sequence moves.
        #[arg(long, value_name = "N", default_value_t = db::sequences::DEFAULT_GAP)]
        id_gap: i64,
    },
    /// The key that seals merchant endpoint secrets at rest.
    Secrets {
        #[command(subcommand)]
        command: SecretsCommand,
    },
    /// The event log's months: list them, archive what is past `[history] keep_days`, verify
    /// an archive (docs/history.md).
    History {
        #[command(subcommand)]
        command: crate::history::command::HistoryCommand,
    },
    /// Re-sign provider events from a JSONL file and deliver them to a gateway (finance replay).
    Replay(ReplayArgs),
    /// Write the stored verified callbacks of a provider as replayable JSONL to stdout.
    Export(ExportArgs),
    /// Validate the configuration as `serve` would (env secrets, TLS files) and print a
    /// redacted summary; exit 0 if it is good, 2 if not.
    CheckConfig,
    /// Compare a provider's report of money movements (JSONL) with the ledger.
    Reconcile(ReconcileArgs),
    /// Match a provider's settlement report (and a bank statement) with the ledger, payout by
    /// payout, and book the fees the ledger does not hold yet.
    Settle(SettleArgs),
    /// Sign a sample event with a provider's configured secret, in its payload format, post it
    /// to the gateway and print the answer (like `stripe trigger`).
    SendTestEvent(SendTestEventArgs),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Mint a token for a user and print it (once; only its SHA-256 is stored).
    Issue {
        #[arg(long)]
        user_id: i64,
    },
}

#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Add an operator and print its key alone on stdout (once; only its SHA-256 is stored).
    Add {
        #[arg(long)]
        name: String,
        /// viewer, finance, operator or admin (each includes the ones before it).
        #[arg(long)]
        role: String,
        /// The key stops working after this many days (1 to 3650; default: never).
        #[arg(long, value_name = "N")]
        expires_in_days: Option<u32>,
    },
    /// List operators: name, role, created, expiry, last use and state; never a key.
    List,
    /// Revoke an operator's key: its next request is refused, its console session ends.
    Revoke {
        #[arg(long)]
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk the audit log's hash chain: exit 0 when it is whole, 1 naming the first broken row
    /// (deleted, changed or moved).
    Verify,
}

#[derive(Debug, Subcommand)]
pub enum SecretsCommand {
    /// Re-seal every endpoint secret, sealed under the old key, with `[secrets] key`, in one
    /// transaction (all or nothing); restart or wait a second for the gateways to reload.
    Rekey {
        /// The key the secrets are sealed with now: `env:NAME`, or `-` to read it from stdin
        /// (never the key itself: a command line is seen by `ps` and kept in shell history).
        #[arg(long, value_name = "env:NAME|-")]
        old_key: String,
    },
}

impl Cli {
    /// Runs the command. `serve` is the server ([`crate::startup::serve`]), handed in by
    /// `main`: the one-shot commands here do not build the server, so the command line sits
    /// beside it rather than above it.
    pub async fn run<F>(self, serve: impl FnOnce(Settings, bool) -> F) -> Result<(), CommandError>
    where
        F: Future<Output = Result<(), CommandError>>,
    {
        let settings = Settings::load(self.config.as_deref(), &ProcessEnv)?;
        match self.command {
            Command::Serve { no_migrate } => serve(settings, no_migrate).await,
            Command::CheckConfig => {
                preflight::check(&settings)?;
                print!("{}", preflight::summary(&settings, self.config.as_deref()));
                // What only the database can tell: whether endpoints made by API need the key.
                // Checked when the database answers within the connect bound; said when not.
                match db::connect(settings.database_url()?).await {
                    Ok(mut conn) => {
                        preflight::report_runtime_role(&mut conn).await;
                        match preflight::endpoints_need_a_key(&settings, &mut conn).await {
                            Err(CommandError::Runtime(error)) => eprintln!(
                                "check-config: the database did not say whether it holds endpoints made by API (not migrated yet?): {error}"
                            ),
                            other => other?,
                        }
                    }
                    Err(error) => eprintln!(
                        "check-config: the database did not answer ({error}); whether endpoints made by API need [secrets] key was not checked"
                    ),
                }
                Ok(())
            }
            Command::Migrate => {
                let applied = db::run_migrations(settings.migrate_database_url()?).await?;
                println!("applied {} migration(s)", applied.len());
                Ok(())
            }
            Command::Cleanup => {
                let mut conn = db::connect(settings.database_url()?).await?;
                let batch = settings.idempotency.cleanup_batch_size;
                let deleted = cleanup::run_pass(&mut conn, batch)
                    .await
                    .map_err(anyhow::Error::from)?;
                println!("deleted {deleted} expired idempotency record(s)");
                let keep = retention::Keep::of(&settings);
                let removed = retention::run_pass(&mut conn, &keep, batch)
                    .await
                    .map_err(anyhow::Error::from)?;
                println!(
                    "deleted {} delivered notification(s) past retention",
                    removed.delivered
                );
                println!(
                    "deleted {} failed notification(s) past retention",
                    removed.failed
                );
                println!(
                    "dropped {} pending notification(s) of disabled endpoints beyond what they keep",
                    removed.dropped
                );
                let transmissions = transmission::delete_expired(&mut conn, batch)
                    .await
                    .map_err(anyhow::Error::from)?;
                println!("deleted {transmissions} expired transmission binding(s)");
                // A person deleted rows by hand: on record, with what went. The passes commit
                // batch by batch, so the row follows them.
                let entry = crate::access::audit::Entry::new(
                    crate::access::audit::Action::IdempotencyCleanup,
                    None,
                    "deleted",
                )
                .with_changes(serde_json::json!({
                    "deleted": deleted,
                    "notifications_delivered": removed.delivered,
                    "notifications_failed": removed.failed,
                    "notifications_dropped": removed.dropped,
                    "transmissions": transmissions,
                }));
                crate::access::audit::record(&mut conn, &crate::access::command_line(), entry)
                    .await
                    .map_err(anyhow::Error::from)?;
                Ok(())
            }
            Command::Token {
                command: TokenCommand::Issue { user_id },
            } => {
                if user_id <= 0 {
                    return Err(ConfigError("--user-id must be greater than 0".into()).into());
                }
                let mut conn = db::connect(settings.database_url()?).await?;
                let context = crate::access::command_line();
                let token = auth::issue_token_audited(&mut conn, user_id, &context)
                    .await
                    .map_err(anyhow::Error::from)?;
                println!("{token}");
                Ok(())
            }
            Command::Operator { command } => operator_command(&settings, command).await,
            Command::AfterRestore { id_gap } => {
                if id_gap <= 0 {
                    return Err(ConfigError("--id-gap must be greater than 0".into()).into());
                }
                let mut conn = db::connect(settings.migrate_database_url()?).await?;
                let advanced = db::sequences::advance(&mut conn, id_gap)
                    .await
                    .map_err(anyhow::Error::from)?;
                for sequence in &advanced {
                    println!(
                        "{:<36} {:>20} -> {}",
                        sequence.name, sequence.before, sequence.after
                    );
                }
                eprintln!(
                    "moved {} sequence(s) {id_gap} past their restored values: no id the lost timeline handed out is handed out again",
                    advanced.len()
                );
                Ok(())
            }
            Command::Audit {
                command: AuditCommand::Verify,
            } => {
                let mut conn = db::connect_reader(settings.read_database_url()?).await?;
                let verdict = crate::access::chain::verify_all(&mut conn)
                    .await
                    .map_err(anyhow::Error::from)?;
                match verdict.broken {
                    None => {
                        match verdict.newest {
                            Some((id, hash)) => println!(
                                "audit log whole: {} row(s); the newest is row {id}, row_hash {hash}",
                                verdict.rows
                            ),
                            None => println!("audit log whole: no rows yet"),
                        }
                        Ok(())
                    }
                    Some(broken) => {
                        println!("audit log broken: {broken}");
                        Err(anyhow::anyhow!("the audit log's hash chain is broken").into())
                    }
                }
            }
            Command::History { command } => crate::history::command::run(&settings, command).await,
            Command::Secrets {
                command: SecretsCommand::Rekey { old_key },
            } => {
                let new = settings.secrets.key.as_ref().ok_or_else(|| {
                    ConfigError("secrets rekey needs the new key in [secrets] key".into())
                })?;
                let old = crate::config::secrets::parse_old_key(&old_key, &ProcessEnv, || {
                    let mut line = String::new();
                    std::io::stdin().read_line(&mut line).map(|_| line)
                })?;
                let mut conn = db::connect(settings.database_url()?).await?;
                let context = crate::access::command_line();
                let count = crate::notifications::endpoints::rekey(&mut conn, &old, new, &context)
                    .await
                    .map_err(|e| match e {
                        crate::notifications::endpoints::RekeyError::Database(e) => {
                            CommandError::Runtime(e.into())
                        }
                        usage => CommandError::Config(ConfigError(usage.to_string())),
                    })?;
                println!("re-sealed the secrets of {count} endpoint(s) under [secrets] key");
                Ok(())
            }
            Command::Replay(args) => {
                let summary = replay::run(&settings, &args).await?;
                print!("{}", summary.table());
                if summary.is_clean() {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!(
                        "replay finished with {} conflict(s) and {} failure(s)",
                        summary.conflict,
                        summary.failed
                    )
                    .into())
                }
            }
            Command::Export(args) => {
                let mut conn = db::connect_reader(settings.read_database_url()?).await?;
                let stdout = std::io::stdout();
                let mut out = std::io::BufWriter::new(stdout.lock());
                let count = export::run(&mut conn, &args, &mut out).await?;
                eprintln!(
                    "exported {} callback(s) of {}{}",
                    count.written,
                    args.provider,
                    if count.skipped > 0 {
                        format!(", skipped {} whose body is not UTF-8", count.skipped)
                    } else {
                        String::new()
                    }
                );
                Ok(())
            }
            Command::Reconcile(args) => reconcile_command(&settings, &args).await,
            Command::Settle(args) => settle_command(&settings, &args).await,
            Command::SendTestEvent(args) => {
                let provider = test_event::provider(&settings, &args.provider)
                    .and_then(|provider| test_event::allowed(provider, &args))
                    .map_err(ConfigError)?;
                let (status, answer) = test_event::run(&settings, provider, &args).await?;
                println!("{status} {answer}");
                if (200..300).contains(&status) {
                    let console = format!(
                        "{}/console/events?provider={}",
                        test_event::base_url(&settings, &args)?,
                        args.provider
                    );
                    eprintln!("See it in the console: {}", shown_url(&console));
                    Ok(())
                } else {
                    Err(anyhow::anyhow!("the gateway answered {status}").into())
                }
            }
        }
    }
}

/// `operator add | list | revoke`: each change commits with its audit row (actor
/// `cli:<login name>`).
async fn operator_command(
    settings: &Settings,
    command: OperatorCommand,
) -> Result<(), CommandError> {
    let context = crate::access::command_line();
    match command {
        OperatorCommand::Add {
            name,
            role,
            expires_in_days,
        } => {
            let usage = |e: operator::AddError| CommandError::Config(ConfigError(e.to_string()));
            let name = operator::OperatorName::parse(&name).map_err(usage)?;
            let role = Role::parse(&role).ok_or_else(|| {
                ConfigError("--role must be viewer, finance, operator or admin".into())
            })?;
            let mut conn = db::connect(settings.database_url()?).await?;
            let key = operator::add(&mut conn, &context, &name, role, expires_in_days)
                .await
                .map_err(|e| match e {
                    operator::AddError::Database(e) => CommandError::Runtime(e.into()),
                    usage_error => usage(usage_error),
                })?;
            println!("{key}");
            eprintln!(
                "operator {} added with role {role}; the key above is shown once",
                name.as_str()
            );
            Ok(())
        }
        OperatorCommand::List => {
            let mut conn = db::connect(settings.database_url()?).await?;
            let rows = operator::list(&mut conn)
                .await
                .map_err(anyhow::Error::from)?;
            print!("{}", operator::table(&rows, chrono::Utc::now()));
            Ok(())
        }
        OperatorCommand::Revoke { name } => {
            let mut conn = db::connect(settings.database_url()?).await?;
            let revoked = operator::revoke(&mut conn, &context, &name)
                .await
                .map_err(anyhow::Error::from)?;
            if revoked {
                println!("revoked {name}");
                Ok(())
            } else {
                Err(ConfigError(format!("no live operator is named {name:?}")).into())
            }
        }
    }
}

/// The `[[providers]]` entry `--provider` names.
fn configured_provider<'a>(
    settings: &'a Settings,
    name: &str,
) -> Result<&'a crate::config::providers::ProviderSettings, ConfigError> {
    settings
        .providers
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ConfigError(format!("--provider {name:?} is not in the configuration")))
}

async fn reconcile_command(settings: &Settings, args: &ReconcileArgs) -> Result<(), CommandError> {
    let provider = configured_provider(settings, &args.provider)?;
    let result = reconcile::run(settings.read_database_url()?, provider.merchant_id, args).await;
    let reconciliation = result.map_err(|error| match error {
        reconcile::ReconcileError::Runtime(e) => CommandError::Runtime(e),
        usage => CommandError::Config(ConfigError(usage.to_string())),
    })?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    reconciliation
        .write_summary(&mut out)
        .and_then(|()| std::io::Write::flush(&mut out))
        .map_err(anyhow::Error::from)?;
    if !args.events.is_empty() {
        received_events(settings, args, &reconciliation, &mut out)?;
    }
    if reconciliation.is_clean() {
        Ok(())
    } else {
        Err(anyhow::anyhow!(
            "reconcile found {} difference(s) and {} malformed line(s)",
            reconciliation.differences(),
            reconciliation.malformed_count
        )
        .into())
    }
}

async fn settle_command(settings: &Settings, args: &SettleArgs) -> Result<(), CommandError> {
    let provider = configured_provider(settings, &args.provider)?;
    let context = crate::access::command_line();
    let settlement = settlement::run(settings.database_url()?, provider, args, &context)
        .await
        .map_err(|error| match error {
            settlement::SettleError::Runtime(e) => CommandError::Runtime(e),
            input => CommandError::Config(ConfigError(input.to_string())),
        })?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    settlement
        .write_summary(&mut out)
        .and_then(|()| std::io::Write::flush(&mut out))
        .map_err(anyhow::Error::from)?;
    match settlement.differences() {
        0 => Ok(()),
        n => Err(anyhow::anyhow!("settle found {n} difference(s)").into()),
    }
}

/// `reconcile --events`: each payment the ledger misses or is short of (`missing_in_ledger`,
/// `amount_mismatch` below the report) as the event files know it.
fn received_events(
    settings: &Settings,
    args: &ReconcileArgs,
    reconciliation: &reconcile::Reconciliation,
    out: &mut dyn std::io::Write,
) -> Result<(), CommandError> {
    let missing = reconciliation.short_ids();
    let providers = crate::providers::configure_all(&settings.providers);
    let found = reconcile::events::find(&args.events, &args.provider, &providers, &missing)?;
    let mut ids: Vec<&String> = missing.iter().collect();
    ids.sort();
    let write = |out: &mut dyn std::io::Write| -> std::io::Result<()> {
        writeln!(
            out,
            "\npayments the ledger misses or is short of, in the event files ({} of {} received):",
            found.len(),
            missing.len()
        )?;
        for id in ids {
            match found.get(id) {
                Some(events) => {
                    let described: Vec<String> = events.iter().map(|e| e.describe()).collect();
                    writeln!(out, "received      {id}  {}", described.join("; "))?;
                }
                None => writeln!(out, "not received  {id}")?,
            }
        }
        out.flush()
    };
    write(out).map_err(anyhow::Error::from)?;
    if let Some(path) = &args.emit_replay {
        let file = std::fs::File::create(path)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        reconcile::events::write_replay(&found, &mut std::io::BufWriter::new(file))
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}
