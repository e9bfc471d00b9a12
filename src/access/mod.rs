//! People and what they did: operator keys with one role each ([`operator`]), the roles and
//! what each includes ([`role`]), and the append-only audit log that every state-changing
//! admin or console action writes in its own transaction ([`audit`]), whose hash chain
//! ([`chain`]) shows a row deleted, changed or moved.

pub mod audit;
pub mod chain;
pub mod operator;
pub mod role;
pub mod sign_in;

use role::Role;

/// The actor name of the break-glass `[admin] token`, which has the admin role.
pub const BOOTSTRAP: &str = "bootstrap";

/// Who is acting: a person's operator key, the break-glass token, or the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The operator's name, `bootstrap`, or `cli:<os user>`.
    pub name: String,
    pub role: Role,
    /// The operator key's row, when it is one (a console session re-reads it on each request).
    pub operator_id: Option<i64>,
}

impl Actor {
    /// The break-glass `[admin] token`.
    pub fn bootstrap() -> Self {
        Self {
            name: BOOTSTRAP.into(),
            role: Role::Admin,
            operator_id: None,
        }
    }

    /// Whoever runs a command of this binary: they hold the database URL, which is more than
    /// any role gives, so the audit log names them as admins by their login name.
    pub fn command_line() -> Self {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .ok()
            .filter(|u| !u.is_empty() && u.len() <= 64 && u.chars().all(|c| !c.is_control()))
            .unwrap_or_else(|| "unknown".into());
        Self {
            name: format!("cli:{user}"),
            role: Role::Admin,
            operator_id: None,
        }
    }

    /// True when this actor's role includes `needed`.
    pub fn may(&self, needed: Role) -> bool {
        self.role.includes(needed)
    }

    /// This actor in the request `request_id`, as its audit rows name it.
    pub fn in_request(&self, request_id: Option<String>) -> audit::Context {
        audit::Context {
            actor: self.name.clone(),
            role: self.role.as_str(),
            request_id,
        }
    }
}

/// The command line's actor, outside any request, as its audit rows name it.
pub fn command_line() -> audit::Context {
    Actor::command_line().in_request(None)
}
