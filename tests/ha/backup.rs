//! pgBackRest under Patroni (deploy/pgbackrest/patroni.yml, `scripts/ha-cluster start
//! --backup`): the gateway serves on the cluster with its two roles, a full backup is taken on
//! node1, a switchover makes node2 the primary, an incremental backup is taken there into the
//! same repository (the archive carries on, on the new timeline), and node1, its disk lost, is
//! rebuilt from those backups and the archive rather than copied from the primary.

use std::time::Duration;

use crate::support::gateway::GatewayProcess;
use crate::support::ha::HaCluster;
use crate::support::simulator::{Event, Simulator};
use crate::support::{config_with, connect, insert_orders};

async fn deliver(provider: &Simulator, orders: &[(i64, i64)], from: usize, to: usize) {
    for (n, (order_id, amount)) in orders.iter().enumerate().take(to).skip(from) {
        let ack = provider
            .deliver(&Event::payment(&format!("ha_b{n}"), *order_id, *amount), 0)
            .await
            .expect("acknowledged");
        assert_eq!(ack.status, 200, "{}", ack.body);
    }
}

async fn transfers(url: &str) -> i64 {
    connect(url)
        .await
        .query_one("SELECT count(*) FROM ledger_transfers", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn backups_continue_across_a_switchover_and_a_replica_is_built_from_them() {
    let _serial = crate::SERIAL.lock().await;
    let cluster = tokio::task::spawn_blocking(|| HaCluster::start_with(&["--backup"]))
        .await
        .unwrap();
    let superuser_url = cluster.url();
    let runtime_url = cluster.run(&["url", "--runtime"]);
    let owner_url = cluster.run(&["url", "--owner"]);
    let config = config_with(
        &runtime_url,
        &format!("[database]\nmigrate_url = \"{owner_url}\"\n"),
    );
    let gateway = GatewayProcess::spawn_on(&runtime_url, &config).await;
    let orders = insert_orders(&connect(&superuser_url).await, 40).await;
    let provider = Simulator::new(vec![gateway.address()]);

    deliver(&provider, &orders, 0, 20).await;
    cluster.run(&["backup", "full"]);
    cluster.run(&["failover"]);
    assert_eq!(cluster.primary(), "node2");
    deliver(&provider, &orders, 20, 40).await;
    cluster.run(&["backup", "incr"]);
    let info: serde_json::Value =
        serde_json::from_str(&cluster.run(&["pgbackrest", "info", "--output=json"])).unwrap();
    let backups: Vec<&str> = info[0]["backup"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(backups, ["full", "incr"], "{info}");
    assert_eq!(info[0]["status"]["message"], "ok", "{info}");

    // node1, now the standby, loses its disk; Patroni makes it a replica again from the
    // repository.
    let logged_before = cluster.patroni_log("node1").len();
    cluster.run(&["kill-node", "node1"]);
    cluster.remove_data("node1");
    cluster.run(&["start-node", "node1"]);
    cluster
        .wait_for("node1", "/sync", Duration::from_secs(120))
        .await;
    assert!(
        cluster.patroni_log("node1")[logged_before..].contains("restore command begin"),
        "node1 was restored by pgBackRest:\n{}",
        cluster.logs()
    );
    assert_eq!(transfers(&cluster.node_url("node1")).await, 40);
    assert_eq!(transfers(&superuser_url).await, 40);
}
