//! A plain HTTP/1.1 listener on an address the test picks (127.0.0.1, 127.0.0.2, ::1): it
//! reads each request and answers `204`, counting the connections made to it. It stands for
//! an internal service the gateway must never reach, or for an allowed endpoint that must be
//! reached.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct CountingListener {
    pub port: u16,
    accepted: Arc<AtomicUsize>,
}

impl CountingListener {
    /// `None` when the address cannot be bound here (no IPv6, say).
    pub fn start(address: &str) -> Option<Self> {
        let listener = TcpListener::bind((address, 0)).ok()?;
        let port = listener.local_addr().ok()?.port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = read_request(&mut stream);
                let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n");
            }
        });
        Some(Self { port, accepted })
    }

    /// Connections made to it so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Reads a request's head and its content-length body.
pub fn read_request(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut data = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        let n = stream.read(&mut buffer)?;
        if n == 0 {
            return Ok(());
        }
        data.extend_from_slice(&buffer[..n]);
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while data.len() < end + 4 + length {
                let n = stream.read(&mut buffer)?;
                if n == 0 {
                    break;
                }
                data.extend_from_slice(&buffer[..n]);
            }
            return Ok(());
        }
    }
}
