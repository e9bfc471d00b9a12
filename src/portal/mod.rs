//! The merchant portal (docs/portal.md): a merchant's engineer opens a one-time link and sees,
//! in a browser, what the API shows their merchant: its endpoints (made, changed, filtered,
//! rate-limited, rotated, tested, disabled), its notifications with their attempts and bodies
//! (and redelivers one), and its recent events. [`sessions`] keeps the links and sessions; the
//! pages are `crate::routes::portal`, server-rendered like the console.

pub mod sessions;
