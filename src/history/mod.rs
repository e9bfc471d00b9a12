//! History that never fills the disk (docs/history.md): the event log partitioned by month,
//! partitions made ahead, and months past `[history] keep_days` archived to compressed JSONL
//! with a SHA-256 manifest, read back, then detached and dropped.

pub mod archive;
pub mod command;
pub mod idle_cpu;
pub mod partitions;
pub mod pass;
