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
