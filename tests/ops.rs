#![cfg(all(feature = "telegram", feature = "discord", feature = "slack"))]
//! End to end: the ops endpoint of the real `mnemo run` binary, with the
//! fake Telegram Bot API, Slack or Discord gateway, and the fake model
//! server, as the only fakes. Metrics move with real turns, readiness
//! follows the platform connection, and every turn leaves one log line
//! without its text.

use crate::support;
use mnemo_testkit::discord as discord_fake;
use mnemo_testkit::slack as slack_fake;
use mnemo_testkit::telegram as fake_api;

use fake_api::{FakeBotApi, TOKEN, text_message, user};
use mnemo_sessions::Layout;
use serde_json::Value;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use support::FakeModel;

const ADA: i64 = 42;

/// `mnemo run` serving Telegram with `ops.listen` on a free local port.
struct Running {
    child: Child,
    dir: tempfile::TempDir,
    ops: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Serves Telegram from `api` (polling every second).
fn start(api: &FakeBotApi, model_url: &str) -> Running {
    let telegram = json!({ "enabled": true, "apiUrl": api.url, "pollTimeoutSecs": 1 });
    start_serving("telegram", telegram, &[("TELEGRAM_BOT_TOKEN", TOKEN)], model_url)
}

/// `mnemo run` serving only `channel` (its config `section`, its tokens in
/// `tokens`), direct messages open.
fn start_serving(channel: &str, section: Value, tokens: &[(&str, &str)], model_url: &str) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = json!({
        "stateDir": dir.path().join("state"),
        "model": { "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_TEST_KEY",
                   "model": "fake-1", "timeoutSecs": 10, "maxRetries": 0 },
        "channels": { "console": { "enabled": false }, channel: section },
        "ops": { "listen": port.to_string() },
    });
    let path = dir.path().join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    let access = Layout::new(dir.path().join("state"), channel).access_path();
    std::fs::create_dir_all(access.parent().unwrap()).unwrap();
    std::fs::write(access, r#"{"dmPolicy": "open"}"#).unwrap();
    let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
    let child = support::mnemo(&path, dir.path())
        .arg("run")
        .envs(tokens.iter().copied())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    Running {
        child,
        dir,
        ops: format!("http://127.0.0.1:{port}"),
    }
}

/// GETs `path` from the ops endpoint: status and body (0 while not up).
async fn get(ops: &str, path: &str) -> (u16, String) {
    match reqwest::get(format!("{ops}{path}")).await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

/// Polls `path` until `check` holds ([`support::eventually`]); returns the body.
async fn until(ops: &str, path: &str, what: &str, check: impl Fn(u16, &str) -> bool) -> String {
    support::eventually(what, async || {
        let (status, body) = get(ops, path).await;
        check(status, &body).then_some(body)
    })
    .await
}

/// The value of the sample `line` (`name{labels}`) in a scrape, 0 if absent.
fn sample(scrape: &str, line: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn log_text(dir: &Path) -> String {
    let mut text = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir(dir.join("state/logs")) {
        for entry in entries.flatten() {
            text += &String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap_or_default());
        }
    }
    text
}

fn state(run: &Running) -> PathBuf {
    run.dir.path().join("state")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_real_turns_and_tokens_and_each_turn_logs_one_line_without_text() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let run = start(&api, &model_url);
    let (status, body) = {
        until(&run.ops, "/healthz", "healthz", |s, _| s == 200).await;
        get(&run.ops, "/healthz").await
    };
    assert_eq!((status, body.as_str()), (200, "ok\nmodel ok\n"));

    let before = get(&run.ops, "/metrics").await.1;
    let answered = r#"mnemo_turns_total{channel="telegram",outcome="answered"}"#;
    assert_eq!(sample(&before, answered), 0.0);
    for (i, text) in ["the secret word is pumpernickel", "and the colour is ultramarine"]
        .iter()
        .enumerate()
    {
        api.push_message(text_message(ADA, user(ADA, "Ada"), text));
        api.wait_for_calls("sendMessage", i + 1).await;
    }
    let scrape = until(&run.ops, "/metrics", "two answered turns", |_, b| {
        sample(b, answered) == 2.0
    })
    .await;
    assert_eq!(
        sample(
            &scrape,
            r#"mnemo_model_input_tokens_total{model="fake-1",purpose="answer"}"#
        ),
        20.0,
        "the fake model reports 10 prompt tokens per call: {scrape}"
    );
    assert_eq!(
        sample(
            &scrape,
            r#"mnemo_model_output_tokens_total{model="fake-1",purpose="answer"}"#
        ),
        10.0
    );
    assert_eq!(
        sample(
            &scrape,
            r#"mnemo_turn_seconds_count{channel="telegram",outcome="answered"}"#
        ),
        2.0
    );
    assert_eq!(sample(&scrape, r#"mnemo_model_seconds_count{purpose="answer"}"#), 2.0);
    assert!(
        scrape.contains(r#"mnemo_platform_connected{channel="telegram"} 1"#),
        "{scrape}"
    );
    let labels: Vec<&str> = scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| Some(&l[l.find('{')?..=l.find('}')?]))
        .collect();
    assert!(!labels.is_empty());
    assert!(
        labels.iter().all(|l| !l.contains("42") && !l.contains("Ada")),
        "no user id or name in any label: {labels:?}"
    );

    // A user not allowed in a group is refused, and counted by reason.
    let group = -100_777;
    api.push_message(text_message(group, user(7, "Eve"), "hello group"));
    until(&run.ops, "/metrics", "a refused message", |_, b| {
        sample(
            b,
            r#"mnemo_refused_messages_total{channel="telegram",reason="group_not_enabled"}"#,
        ) == 1.0
    })
    .await;

    let logs = log_text(run.dir.path());
    let turns: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("mnemo::turn") || l.contains("\"turn\""))
        .filter(|l| l.contains("outcome"))
        .collect();
    assert!(turns.len() >= 2, "one line per turn: {logs}");
    let line = turns.iter().find(|l| l.contains("answered")).unwrap();
    for field in ["queue_ms", "memory_ms", "model_ms", "send_ms", "tokens_in", "user"] {
        assert!(line.contains(field), "{field} in {line}");
    }
    assert!(
        !logs.contains("pumpernickel") && !logs.contains("ultramarine"),
        "no message text in logs"
    );
    assert!(state(&run).is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_tool_calls_are_counted_by_tool_and_outcome_and_logged_without_their_text() {
    let (model, model_url) = FakeModel::start().await;
    model.script_tools(vec![
        vec![
            ("memory_remember", json!({"text": "canary-TEA-5501 is my tea"})),
            ("memory_forget", json!({"key": "canary-NOPE-5502"})),
        ],
        vec![],
    ]);
    let api = FakeBotApi::start().await;
    let run = start(&api, &model_url);
    api.push_message(text_message(ADA, user(ADA, "Ada"), "remember my tea"));
    api.wait_for_calls("sendMessage", 1).await;
    let ok = r#"mnemo_memory_tool_calls_total{channel="telegram",tool="memory_remember",outcome="ok"}"#;
    let tools_in = r#"mnemo_model_input_tokens_total{model="fake-1",purpose="tools"}"#;
    let scrape = until(&run.ops, "/metrics", "a counted tool call and its tokens", |_, b| {
        sample(b, ok) == 1.0 && sample(b, tools_in) > 0.0
    })
    .await;
    assert_eq!(
        sample(
            &scrape,
            r#"mnemo_memory_tool_calls_total{channel="telegram",tool="memory_forget",outcome="not_found"}"#
        ),
        1.0,
        "{scrape}"
    );
    // The turn's first model call is the answer's; the one that carried
    // the tool results back is counted as `tools` (10 in, 5 out each).
    let tokens = |purpose: &str| {
        let labels = format!(r#"{{model="fake-1",purpose="{purpose}"}}"#);
        (
            sample(&scrape, &format!("mnemo_model_input_tokens_total{labels}")),
            sample(&scrape, &format!("mnemo_model_output_tokens_total{labels}")),
        )
    };
    assert_eq!(
        (tokens("answer"), tokens("tools")),
        ((10.0, 5.0), (10.0, 5.0)),
        "{scrape}"
    );
    let logs = log_text(run.dir.path());
    let calls: Vec<&str> = logs.lines().filter(|l| l.contains("memory tool call")).collect();
    for tool in ["memory_remember", "memory_forget"] {
        assert!(calls.iter().any(|l| l.contains(tool)), "a line for {tool}: {logs}");
    }
    for field in ["tool", "args_bytes", "result_bytes", "outcome"] {
        assert!(calls[0].contains(field), "{field} in {}", calls[0]);
    }
    assert!(
        !logs.contains("canary-TEA-5501") && !logs.contains("canary-NOPE-5502"),
        "no tool argument text in logs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_turns_false_while_the_platform_drops_and_back_when_it_returns() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let run = start(&api, &model_url);
    let ready = until(&run.ops, "/readyz", "ready", |s, _| s == 200).await;
    assert!(
        ready.contains("ok platform telegram") && ready.contains("ok state folder writable"),
        "{ready}"
    );

    // Another poller took over the token: Telegram stops serving us. (A 5xx
    // would do too, but teloxide sleeps 10 s on those before reporting.)
    let conflict = r#"{"ok":false,"error_code":409,"description":"Conflict: terminated by other getUpdates request"}"#;
    api.fail_next("getUpdates", 409, conflict);
    let down = until(&run.ops, "/readyz", "not ready", |s, _| s == 503).await;
    assert!(down.contains("failing platform telegram"), "{down}");

    until(&run.ops, "/readyz", "ready again", |s, _| s == 200).await;
    let scrape = get(&run.ops, "/metrics").await.1;
    assert_eq!(
        sample(&scrape, r#"mnemo_platform_reconnects_total{channel="telegram"}"#),
        1.0,
        "{scrape}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_discord_gateway_counts_as_a_reconnect_and_readiness_comes_back() {
    let (_model, model_url) = FakeModel::start().await;
    let discord = discord_fake::FakeDiscord::start().await;
    let section = json!({ "enabled": true, "apiUrl": discord.url() });
    let run = start_serving(
        "discord",
        section,
        &[("DISCORD_BOT_TOKEN", "discord-test-token")],
        &model_url,
    );
    let ready = until(&run.ops, "/readyz", "ready", |s, _| s == 200).await;
    assert!(ready.contains("ok platform discord"), "{ready}");
    let reconnects = r#"mnemo_platform_reconnects_total{channel="discord"}"#;
    assert_eq!(sample(&get(&run.ops, "/metrics").await.1, reconnects), 0.0);

    discord.drop_connection();
    discord.resumed().await;
    until(&run.ops, "/metrics", "a counted reconnect", |_, b| {
        sample(b, reconnects) == 1.0
    })
    .await;
    until(&run.ops, "/readyz", "ready again", |s, _| s == 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_slack_socket_counts_as_a_reconnect_and_readiness_comes_back() {
    let (_model, model_url) = FakeModel::start().await;
    let slack = slack_fake::FakeSlack::start().await;
    let section = json!({ "enabled": true, "mode": "socket", "apiUrl": slack.api_url });
    let tokens = [
        ("SLACK_BOT_TOKEN", slack_fake::BOT_TOKEN),
        ("SLACK_APP_TOKEN", slack_fake::APP_TOKEN),
    ];
    let run = start_serving("slack", section, &tokens, &model_url);
    let ready = until(&run.ops, "/readyz", "ready", |s, _| s == 200).await;
    assert!(ready.contains("ok platform slack"), "{ready}");

    slack.drop_socket();
    slack.wait_until("a second connection", |f| f.connections() >= 2).await;
    let reconnects = r#"mnemo_platform_reconnects_total{channel="slack"}"#;
    until(&run.ops, "/metrics", "a counted reconnect", |_, b| {
        sample(b, reconnects) == 1.0
    })
    .await;
    until(&run.ops, "/readyz", "ready again", |s, _| s == 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_outage_leaves_the_broker_ready_and_shows_in_healthz_and_the_metrics() {
    let (model, model_url) = FakeModel::start().await;
    model.down.store(true, std::sync::atomic::Ordering::SeqCst);
    let api = FakeBotApi::start().await;
    let run = start(&api, &model_url);
    until(&run.ops, "/readyz", "ready", |s, _| s == 200).await;

    let failed = r#"mnemo_turns_total{channel="telegram",outcome="model_failed"}"#;
    for i in 1..=4 {
        api.push_message(text_message(ADA, user(ADA, "Ada"), &format!("question {i}")));
        until(&run.ops, "/metrics", "a failed turn", |_, b| {
            sample(b, failed) == f64::from(i)
        })
        .await;
    }
    // Four failed calls in a row: the model is failing, the broker is not.
    let (status, ready) = get(&run.ops, "/readyz").await;
    assert_eq!(status, 200, "a model outage does not make the broker unready: {ready}");
    assert!(!ready.contains("model"), "{ready}");
    let (status, health) = get(&run.ops, "/healthz").await;
    assert_eq!(status, 200, "{health}");
    assert!(
        health.starts_with("ok\nmodel failing: the last 4 answer calls failed; the last failed with status 503 at "),
        "{health}"
    );
    let scrape = get(&run.ops, "/metrics").await.1;
    for (line, value) in [
        ("mnemo_model_healthy", 0.0),
        ("mnemo_model_answer_failures_in_a_row", 4.0),
        ("mnemo_ready", 1.0),
        (r#"mnemo_model_failures_total{purpose="answer",status="503"}"#, 4.0),
        (
            r#"mnemo_turn_seconds_count{channel="telegram",outcome="model_failed"}"#,
            4.0,
        ),
    ] {
        assert_eq!(sample(&scrape, &format!("{line} ")), value, "{line}: {scrape}");
    }

    // Back up, but the stream breaks after some text: a cut turn, its own outcome.
    model.down.store(false, std::sync::atomic::Ordering::SeqCst);
    model.answer_with(Some("A half answer that stops"));
    model.stream_slowly(6, std::time::Duration::from_millis(5));
    model.break_stream_after(Some(2));
    api.push_message(text_message(ADA, user(ADA, "Ada"), "question 5"));
    let cut = r#"mnemo_turn_seconds_count{channel="telegram",outcome="cut"}"#;
    until(&run.ops, "/metrics", "a cut turn", |_, b| sample(b, cut) == 1.0).await;

    // Whole again: the model is healthy at its first whole answer.
    model.break_stream_after(None);
    api.push_message(text_message(ADA, user(ADA, "Ada"), "question 6"));
    let answered = r#"mnemo_turns_total{channel="telegram",outcome="answered"}"#;
    let scrape = until(&run.ops, "/metrics", "an answered turn", |_, b| {
        sample(b, answered) == 1.0
    })
    .await;
    assert_eq!(sample(&scrape, "mnemo_model_healthy "), 1.0, "{scrape}");
    assert_eq!(get(&run.ops, "/healthz").await, (200, "ok\nmodel ok\n".to_string()));
}

/// The metric names a scrape shows: each family's sample names by its
/// `# TYPE` (a counter's `_total`, a histogram's `_bucket`/`_sum`/`_count`,
/// an info's `_info`), and every sample line's.
fn exported_names(scrape: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in scrape.lines() {
        if let Some(typed) = line.strip_prefix("# TYPE ") {
            let mut words = typed.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        } else if !line.starts_with('#') {
            let end = line.find(['{', ' ']).unwrap_or(line.len());
            names.insert(line[..end].to_string());
        }
    }
    names
}

/// The `mnemo_*` and `process_*` names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("mnemo_") || w.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

/// Every `expr` string anywhere in a Grafana dashboard.
fn dashboard_exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "query" | "definition", Value::String(e)) => out.push(e.clone()),
                    _ => dashboard_exprs(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_alert_rules_and_dashboard_name_only_metrics_the_broker_exports() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let run = start(&api, &model_url);
    let scrape = until(&run.ops, "/metrics", "a scrape", |s, _| s == 200).await;
    let exported = exported_names(&scrape);
    for name in [
        "mnemo_build_info",
        "mnemo_ready",
        "mnemo_model_healthy",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(exported.contains(name), "{name} is not exported: {scrape}");
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");

    let rules: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(root.join("prometheus/alerts.yaml")).unwrap())
        .expect("alerts.yaml is YAML");
    let mut alerts = Vec::new();
    let mut named = Vec::new();
    for group in rules["groups"].as_array().expect("groups") {
        assert!(group["name"].is_string(), "{group}");
        for rule in group["rules"].as_array().expect("rules") {
            let alert = rule["alert"].as_str().expect("every rule is an alert with a name");
            let expr = rule["expr"].as_str().unwrap_or_else(|| panic!("{alert}: expr"));
            assert!(
                matches!(rule["labels"]["severity"].as_str(), Some("warning" | "critical")),
                "{alert}: severity"
            );
            assert!(rule["annotations"]["summary"].is_string(), "{alert}: summary");
            if let Some(wait) = rule.get("for") {
                let wait = wait.as_str().unwrap_or_default();
                assert!(wait.ends_with('m') || wait.ends_with('s'), "{alert}: for {wait}");
            }
            assert!(!metric_names(expr).is_empty(), "{alert} watches no mnemo metric");
            named.extend(metric_names(expr).into_iter().map(|m| (alert.to_string(), m)));
            alerts.push(alert.to_string());
        }
    }
    for wanted in [
        "MnemoModelFailing",
        "MnemoNoTurnsAnswered",
        "MnemoNotReady",
        "MnemoSlowTurns",
    ] {
        assert!(alerts.iter().any(|a| a == wanted), "{wanted} missing: {alerts:?}");
    }

    let dashboard: Value = serde_json::from_slice(&std::fs::read(root.join("grafana/mnemo.json")).unwrap())
        .expect("the dashboard is JSON");
    assert!(dashboard["title"].is_string() && dashboard["panels"].as_array().is_some_and(|p| p.len() > 5));
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() > 10, "{exprs:?}");
    // The cost view: tokens in and out by purpose alone (answer, tools,
    // summary, digest), as `mnemo sessions usage` splits them.
    for metric in ["mnemo_model_input_tokens_total", "mnemo_model_output_tokens_total"] {
        assert!(
            exprs
                .iter()
                .any(|e| e.starts_with("sum by (purpose) (increase(") && e.contains(metric)),
            "no per-purpose view of {metric}: {exprs:?}"
        );
    }
    named.extend(
        exprs
            .iter()
            .flat_map(|e| metric_names(e))
            .map(|m| ("dashboard".to_string(), m)),
    );

    let unknown: Vec<_> = named.iter().filter(|(_, m)| !exported.contains(m)).collect();
    assert!(
        unknown.is_empty(),
        "not exported by the broker: {unknown:?}\nexported: {exported:?}"
    );
}

/// On the Postgres store the database is a readiness check: a broker that
/// cannot reach it cannot take messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_readiness_follows_the_database() {
    let (_model, model_url) = FakeModel::start().await;
    let api = FakeBotApi::start().await;
    let db = mnemo_testkit::pg::database();
    let store = mnemo_pg::PgStore::connect(&db.url(), 2, std::time::Duration::from_secs(10)).unwrap();
    mnemo_pg::migrate::migrate(&store).await.unwrap();
    drop(store);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = json!({
        "stateDir": dir.path().join("state"),
        "model": { "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_TEST_KEY",
                   "model": "fake-1", "timeoutSecs": 10, "maxRetries": 0 },
        "store": { "kind": "postgres", "urlEnv": "MNEMO_DATABASE_URL" },
        "channels": { "console": { "enabled": false },
                      "telegram": { "enabled": true, "apiUrl": api.url, "pollTimeoutSecs": 1 } },
        "ops": { "listen": port.to_string() },
    });
    let path = dir.path().join("config.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
    let child = support::mnemo(&path, dir.path())
        .arg("run")
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("MNEMO_DATABASE_URL", db.url())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let run = Running {
        child,
        dir,
        ops: format!("http://127.0.0.1:{port}"),
    };
    let ready = until(&run.ops, "/readyz", "ready", |s, _| s == 200).await;
    assert!(ready.contains("ok database"), "{ready}");

    // The database goes away (dropped, its connections ended).
    let admin = format!("postgres://postgres@{}:{}/postgres", db.host, db.port);
    let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP DATABASE \"{}\" WITH (FORCE)", db.name))
        .await
        .unwrap();
    let down = until(&run.ops, "/readyz", "not ready", |s, _| s == 503).await;
    assert!(down.contains("failing database"), "{down}");
    assert!(down.contains("ok platform telegram"), "{down}");
    let scrape = get(&run.ops, "/metrics").await.1;
    assert_eq!(sample(&scrape, "mnemo_ready "), 0.0, "{scrape}");
}
