//! How a command ends, for `main` to turn into the exit code: a configuration or usage error
//! (exit 2, with a one-line reason) or a runtime failure (exit 1). Shared by the one-shot
//! commands ([`crate::cli`]) and the server ([`crate::startup::serve`]).

use std::process::ExitCode;

use crate::config::rules::ConfigError;

/// A command's failure: configuration (exit 2) or runtime (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Runtime(#[from] anyhow::Error),
}

impl CommandError {
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CommandError::Config(_) => ExitCode::from(2),
            CommandError::Runtime(_) => ExitCode::from(1),
        }
    }
}
