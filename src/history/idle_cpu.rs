//! The archive's own CPU work (JSON, gzip, the read-back's hash) on threads at the lowest CPU
//! priority: it uses the cores the callbacks leave idle. On a gateway busy with callbacks it
//! takes longer and their latency stays put; a pass is hourly background work that may. The
//! database's share of an archive (reading the month in batches) is not lowered by this.

/// Runs `work` on a thread of its own at nice 19 and answers its result.
pub async fn run<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> std::io::Result<T> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    // A fresh thread, not tokio's blocking pool: a pooled thread would keep the lowered priority
    // for whatever work it takes next.
    std::thread::Builder::new()
        .name("history-archive".into())
        .spawn(move || {
            lower_this_thread();
            let _ = answer.send(work());
        })?;
    answered
        .await
        .map_err(|_| std::io::Error::other("the archive's thread ended without an answer"))
}

#[cfg(target_os = "linux")]
fn lower_this_thread() {
    // On Linux a nice value belongs to the thread: PRIO_PROCESS with the thread's id lowers
    // this thread alone (setpriority(2), NOTES).
    // SAFETY: plain system calls on this thread's own id, no memory handed over.
    let result = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19)
    };
    if result != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "the archive thread keeps its priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_this_thread() {}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    fn this_threads_nice() -> i32 {
        // SAFETY: reads this thread's own priority.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::getpriority(libc::PRIO_PROCESS, tid)
        }
    }

    #[tokio::test]
    async fn the_work_runs_at_the_lowest_priority_and_the_caller_keeps_its_own() {
        let before = this_threads_nice();
        let inside = super::run(this_threads_nice)
            .await
            .expect("the thread runs");
        assert_eq!(inside, 19);
        assert_eq!(this_threads_nice(), before);
    }
}
