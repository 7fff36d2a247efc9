//! The bare baseline of `loadtest/deployed_bench.py`: the least a queue-to-database
//! pipeline on the same services must do per message, with none of trawl.
//!
//! Publishes N messages to a fresh JetStream work-queue stream (awaiting every
//! publish ack, as trawl's scheduler does), pulls them through one durable pull
//! consumer with C handlers at a time, inserts one row per message into a fresh
//! Postgres database and acks. Prints one JSON line: messages, wall seconds (first
//! publish to last ack), CPU seconds and peak RSS of this process.
//!
//!     cargo run --release -p trawl-tests --example bare_loop -- --messages 10000 --concurrency 64

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_nats::jetstream::{self, consumer::pull, stream};
use futures_util::StreamExt;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, Executor, PgConnection};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().expect("a number"))
}

/// CPU seconds (user + system) and peak RSS in bytes of this process, from /proc.
fn usage() -> (f64, u64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .map_or(0, |kb| kb.parse::<u64>().unwrap() * 1024);
    (ticks / 100.0, hwm)
}

#[tokio::main]
async fn main() {
    let n = arg("--messages", 10_000);
    let concurrency = arg("--concurrency", 64) as usize;
    let admin = std::env::var("TRAWL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let nats_url =
        std::env::var("TRAWL_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let tag = format!("{:012x}", fastrand::u64(..) >> 16);

    let db = format!("bare_{tag}");
    let mut conn = PgConnection::connect(&admin).await.unwrap();
    conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {db}")))
        .await
        .unwrap();
    let base = admin.rsplit_once('/').unwrap().0;
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(&format!("{base}/{db}"))
        .await
        .unwrap();
    pool.execute("CREATE TABLE rows (seq BIGINT PRIMARY KEY, body BYTEA NOT NULL)")
        .await
        .unwrap();

    let client = async_nats::connect(&nats_url).await.unwrap();
    let js = jetstream::new(client);
    let name = format!("BARE_{tag}");
    let subject = format!("bare_{tag}.work");
    let s = js
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .unwrap();
    let consumer = s
        .create_consumer(pull::Config {
            durable_name: Some("bare".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .unwrap();

    let started = Instant::now();
    let publisher = {
        let js = js.clone();
        tokio::spawn(async move {
            for i in 0..n {
                let body = format!("{{\"seq\":{i},\"job\":\"bare\"}}");
                js.publish(subject.clone(), body.into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        })
    };
    let done = Arc::new(AtomicU64::new(0));
    let messages = consumer.messages().await.unwrap();
    messages
        .take(n as usize)
        .for_each_concurrent(concurrency, |m| {
            let (pool, done) = (pool.clone(), done.clone());
            async move {
                let m = m.unwrap();
                let seq = m.info().unwrap().stream_sequence as i64;
                sqlx::query("INSERT INTO rows (seq, body) VALUES ($1, $2)")
                    .bind(seq)
                    .bind(m.payload.to_vec())
                    .execute(&pool)
                    .await
                    .unwrap();
                m.ack().await.unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        })
        .await;
    publisher.await.unwrap();
    let wall = started.elapsed().as_secs_f64();
    let (cpu, rss) = usage();

    js.delete_stream(&name).await.unwrap();
    pool.close().await;
    conn.execute(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {db} WITH (FORCE)"
    )))
    .await
    .unwrap();
    println!(
        "{}",
        serde_json::json!({
            "messages": done.load(Ordering::Relaxed),
            "wall_s": wall,
            "cpu_s": cpu,
            "peak_rss_mb": rss as f64 / 1e6,
        })
    );
}
