use crate::support::{base_config, empty_database, spawn_app, spawn_app_on};

#[tokio::test]
async fn healthz_answers_200() {
    let app = spawn_app().await;
    let response = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn readyz_is_200_on_a_migrated_database() {
    let app = spawn_app().await;
    let response = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn readyz_is_503_when_migrations_are_not_applied() {
    let url = empty_database().await;
    let app = spawn_app_on(&url, &base_config(&url)).await;
    let response = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "not_ready");
}

#[tokio::test]
async fn readyz_is_503_when_the_database_does_not_answer() {
    // Nothing listens on port 1: every connection attempt is refused.
    let url = "postgres://postgres@127.0.0.1:1/nowhere";
    let settings = callback_gateway::config::Settings::from_toml(
        &format!("[server]\nbind = \"127.0.0.1:0\"\nworkers = 1\nacquire_timeout_ms = 500\n[database]\nurl = \"{url}\"\n"),
        &NoEnv,
    )
    .unwrap();
    let app = callback_gateway::startup::Application::build(settings)
        .await
        .unwrap();
    let address = format!("http://127.0.0.1:{}", app.port());
    let handle = app.handle();
    tokio::spawn(app.run_until_stopped());
    let response = reqwest::get(format!("{address}/readyz")).await.unwrap();
    assert_eq!(response.status(), 503);
    // Liveness does not depend on the database.
    assert_eq!(
        reqwest::get(format!("{address}/healthz"))
            .await
            .unwrap()
            .status(),
        200
    );
    handle.stop(false).await;
}

#[tokio::test]
async fn an_unknown_route_is_a_json_404() {
    let app = spawn_app().await;
    let response = app.client.get(app.url("/nope")).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "not_found");
}

struct NoEnv;

impl callback_gateway::config::Environment for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
}

/// One `GET /healthz` on `stream`, keep-alive; the status line of its answer, or `None` when
/// the server closed the connection instead of answering.
async fn healthz_on(stream: &mut tokio::net::TcpStream) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = "GET /healthz HTTP/1.1\r\nHost: gateway\r\nConnection: keep-alive\r\n\r\n";
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // The answer is small and complete once its headers and the body its length names are in.
    loop {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= length {
                return head.lines().next().map(str::to_owned);
            }
        }
    }
}

#[tokio::test]
async fn an_idle_keep_alive_connection_still_serves_the_next_request_after_six_seconds() {
    // A provider (or the load balancer in front) that reuses a connection the server has just
    // closed loses that request; actix's default closed idle connections after 5 s. The idle
    // time is what is under test here, so the test waits it out.
    let app = crate::support::spawn_app().await;
    let address = app.address.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    assert_eq!(
        healthz_on(&mut stream).await.as_deref(),
        Some("HTTP/1.1 200 OK")
    );
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert_eq!(
        healthz_on(&mut stream).await.as_deref(),
        Some("HTTP/1.1 200 OK"),
        "the server closed an idle connection within 6 s"
    );
}
