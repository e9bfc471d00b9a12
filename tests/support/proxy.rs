//! A forward proxy as a client's `HTTPS_PROXY` / `HTTP_PROXY` would name it, started by the
//! test: it records the first line of every request it gets (`CONNECT host:port HTTP/1.1`, or
//! `POST http://host:port/path HTTP/1.1`) and then does what a proxy does, so a client that
//! used it would have reached its target through it: a CONNECT is answered `200` and tunnelled,
//! an absolute-form request is forwarded to its host in origin form and the answer copied back.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct LoggingProxy {
    /// `http://127.0.0.1:PORT`, as the proxy variables take it.
    pub url: String,
    lines: Arc<Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for LoggingProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl LoggingProxy {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let server = tokio::spawn({
            let lines = lines.clone();
            async move {
                while let Ok((stream, _)) = listener.accept().await {
                    tokio::spawn(serve(stream, lines.clone()));
                }
            }
        });
        Self { url, lines, server }
    }

    /// Every request line received so far, in order.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

async fn serve(mut client: TcpStream, lines: Arc<Mutex<Vec<String>>>) {
    let Some((head, rest)) = read_head(&mut client).await else {
        return;
    };
    let text = String::from_utf8_lossy(&head).into_owned();
    let first = text.lines().next().unwrap_or_default().to_owned();
    lines.lock().unwrap().push(first.clone());
    let mut parts = first.split_whitespace();
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    if method.eq_ignore_ascii_case("CONNECT") {
        let Ok(mut upstream) = TcpStream::connect(target).await else {
            let _ = client
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                .await;
            return;
        };
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        let _ = upstream.write_all(&rest).await;
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        return;
    }
    // Absolute form: `POST http://host:port/path HTTP/1.1`.
    let Some(after_scheme) = target.strip_prefix("http://") else {
        let _ = client
            .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let (authority, path) = match after_scheme.find('/') {
        Some(i) => (&after_scheme[..i], &after_scheme[i..]),
        None => (after_scheme, "/"),
    };
    let authority = if authority.contains(':') {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    let Ok(mut upstream) = TcpStream::connect(&authority).await else {
        let _ = client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let rewritten = text.replacen(target, path, 1);
    let _ = upstream.write_all(rewritten.as_bytes()).await;
    let _ = upstream.write_all(&rest).await;
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// The request head (through its blank line) and whatever came after it in the same reads.
async fn read_head(stream: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut data = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        let n = stream.read(&mut buffer).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buffer[..n]);
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = data.split_off(end + 4);
            return Some((data, rest));
        }
        if data.len() > 64 * 1024 {
            return None;
        }
    }
}
