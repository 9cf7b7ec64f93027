//! The deployment files in `deploy/` checked without Docker or a cluster
//! (neither runs here): the Dockerfile's shape (multi-stage, locked build,
//! non-root, state on a volume), the compose file, the systemd unit (keys,
//! hardening, and `systemd-analyze verify` where the tool exists) and the
//! Kubernetes manifests (a StatefulSet with a claim, probes on the ops
//! endpoint of the config they ship, Secret keys for the variables that
//! config names), and the several-brokers variants on Postgres (compose:
//! migration first, one state volume per broker, a webhook load balancer;
//! Kubernetes: a migration Job, a Deployment of two, the webhook port). What is not checked: that the image builds and runs, and
//! that a cluster accepts the manifests — see docs/operations.md, "Deploying".

use mnemo::config::AppConfig;
use serde::Deserialize;
use serde_yaml_ng::Value;
use std::path::{Path, PathBuf};

fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(file)
}

fn read(file: &str) -> String {
    std::fs::read_to_string(deploy(file)).unwrap_or_else(|e| panic!("deploy/{file}: {e}"))
}

const STATE: &str = "/var/lib/mnemo";

/// `(INSTRUCTION, arguments)` per logical Dockerfile line (continuations joined).
fn dockerfile() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in read("Dockerfile").lines() {
        let line = line.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => pending += &format!("{part} "),
            None => {
                pending += line;
                let (op, args) = pending.split_once(' ').unwrap_or((pending.as_str(), ""));
                out.push((op.to_ascii_uppercase(), args.trim().to_string()));
                pending.clear();
            }
        }
    }
    assert!(pending.is_empty(), "a continued line never ends");
    out
}

#[test]
fn the_dockerfile_builds_locked_in_one_stage_and_runs_unprivileged_from_a_volume_in_another() {
    let lines = dockerfile();
    const KNOWN: [&str; 11] = [
        "FROM",
        "WORKDIR",
        "COPY",
        "RUN",
        "ENV",
        "VOLUME",
        "USER",
        "EXPOSE",
        "ENTRYPOINT",
        "CMD",
        "ARG",
    ];
    for (op, _) in &lines {
        assert!(KNOWN.contains(&op.as_str()), "unknown instruction {op}");
    }
    let froms: Vec<&String> = lines.iter().filter(|(op, _)| op == "FROM").map(|(_, a)| a).collect();
    assert!(froms.len() >= 2, "multi-stage");
    let toolchain = format!("rust:{}", env!("CARGO_PKG_RUST_VERSION"));
    assert!(
        froms[0].starts_with(&toolchain) && froms[0].contains(" AS build"),
        "{}",
        froms[0]
    );
    assert!(
        !froms.last().unwrap().contains("rust:"),
        "the final image carries no toolchain"
    );
    assert!(
        lines
            .iter()
            .any(|(op, a)| op == "RUN" && a.contains("cargo build --release --locked")),
        "built with the locked dependencies"
    );
    for (_, args) in lines.iter().filter(|(op, a)| op == "COPY" && a.contains("--from=")) {
        assert!(args.contains("--from=build"), "copies from the named stage: {args}");
    }
    let user = lines.iter().rev().find(|(op, _)| op == "USER").map(|(_, a)| a.as_str());
    assert!(
        user.is_some_and(|u| !u.starts_with("root") && !u.starts_with("0")),
        "non-root: {user:?}"
    );
    assert!(lines.iter().any(|(op, a)| op == "VOLUME" && a.contains(STATE)));
    assert!(
        lines
            .iter()
            .any(|(op, a)| op == "ENV" && a.contains(&format!("MNEMO_STATE_DIR={STATE}")))
    );
    assert!(Path::new(env!("CARGO_MANIFEST_DIR")).join(".dockerignore").is_file());
}

#[test]
fn the_compose_file_keeps_state_on_a_named_volume() {
    let compose: Value = serde_yaml_ng::from_str(&read("compose.yaml")).unwrap();
    let mnemo = &compose["services"]["mnemo"];
    assert_eq!(mnemo["build"]["dockerfile"].as_str(), Some("deploy/Dockerfile"));
    let volumes: Vec<&str> = mnemo["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(volumes.contains(&&*format!("mnemo-state:{STATE}")), "{volumes:?}");
    assert!(
        compose["volumes"].get("mnemo-state").is_some(),
        "declared as a named volume"
    );
    assert_eq!(mnemo["environment"]["MNEMO_STATE_DIR"].as_str(), Some(STATE));
    assert!(mnemo["restart"].as_str().is_some());
}

/// `key=value` pairs of the unit, by section.
fn unit() -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in read("mnemo.service").lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (key, value) = line.split_once('=').unwrap_or_else(|| panic!("not key=value: {line}"));
        out.push((section.clone(), key.to_string(), value.to_string()));
    }
    out
}

#[test]
fn the_systemd_unit_is_hardened_and_keeps_state_and_secrets_where_documented() {
    let unit = unit();
    let get = |key: &str| {
        unit.iter()
            .find(|(s, k, _)| s == "Service" && k == key)
            .map(|(_, _, v)| v.as_str())
    };
    assert_eq!(get("ProtectSystem"), Some("strict"));
    assert_eq!(get("NoNewPrivileges"), Some("yes"));
    assert_eq!(get("StateDirectory"), Some("mnemo"));
    assert_eq!(get("Restart"), Some("on-failure"));
    assert!(get("EnvironmentFile").is_some(), "tokens from an env file");
    assert!(get("User").is_some_and(|u| u != "root") || get("DynamicUser") == Some("yes"));
    assert!(get("ExecStart").is_some_and(|e| e.ends_with(" run")));
    assert_eq!(get("Environment"), Some(&*format!("MNEMO_STATE_DIR={STATE}")));
}

#[test]
fn systemd_analyze_verifies_the_unit_where_it_is_installed() {
    let Ok(probe) = std::process::Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("systemd-analyze not installed: only the key checks above ran");
        return;
    };
    assert!(probe.status.success());
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("mnemo.env");
    std::fs::write(&env_file, "OPENAI_API_KEY=x\n").unwrap();
    // The same unit, pointing at this build's binary and a present env file.
    let text = read("mnemo.service")
        .replace("/usr/local/bin/mnemo", env!("CARGO_BIN_EXE_mnemo"))
        .replace("/etc/mnemo/mnemo.env", env_file.to_str().unwrap());
    let path = dir.path().join("mnemo.service");
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("mnemo.service"))
        .filter(|l| !l.contains("Failed to resolve user") && !l.contains("Failed to look up"))
        .collect();
    assert!(problems.is_empty(), "systemd-analyze verify: {stderr}");
}

#[test]
fn the_kubernetes_example_runs_one_replica_on_a_claim_with_probes_on_the_ops_endpoint_it_configures() {
    let text = read("kubernetes/mnemo.yaml");
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(k))
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let config_text = kind("ConfigMap")["data"]["config.json"].as_str().unwrap();
    let config = AppConfig::parse(config_text, Path::new("ConfigMap mnemo-config")).unwrap();
    assert_eq!(config.state_dir, STATE);
    let port = config.ops.addr().unwrap().expect("ops.listen set").port();

    let set = kind("StatefulSet");
    assert_eq!(
        set["spec"]["replicas"].as_u64(),
        Some(1),
        "one process per state folder"
    );
    let claim = set["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
        .as_str()
        .unwrap();
    let container = &set["spec"]["template"]["spec"]["containers"][0];
    let mounts = container["volumeMounts"].as_sequence().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"].as_str() == Some(claim) && m["mountPath"].as_str() == Some(STATE)),
        "the claim holds the state folder"
    );
    let ops_port = container["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str() == Some("ops"))
        .and_then(|p| p["containerPort"].as_u64());
    assert_eq!(
        ops_port,
        Some(u64::from(port)),
        "the container port is the configured ops.listen"
    );
    assert_eq!(container["livenessProbe"]["httpGet"]["path"].as_str(), Some("/healthz"));
    assert_eq!(container["readinessProbe"]["httpGet"]["path"].as_str(), Some("/readyz"));
    assert_eq!(container["readinessProbe"]["httpGet"]["port"].as_str(), Some("ops"));

    let secret = kind("Secret")["stringData"].as_mapping().unwrap().clone();
    let model = config.model.as_ref().unwrap();
    for name in [
        model.api_key_env().unwrap(),
        config.channels.telegram.token_env.as_str(),
    ] {
        assert!(secret.contains_key(name), "the Secret holds {name}");
    }
    assert_eq!(
        container["envFrom"][0]["secretRef"]["name"].as_str(),
        kind("Secret")["metadata"]["name"].as_str()
    );
}

#[test]
fn the_several_brokers_compose_file_migrates_first_and_gives_each_broker_its_own_state() {
    let mut compose: Value = serde_yaml_ng::from_str(&read("compose.postgres.yaml")).unwrap();
    // Compose resolves `<<:` merge keys (the brokers share an anchor).
    compose.apply_merge().unwrap();
    let services = &compose["services"];
    assert!(services["postgres"]["image"].as_str().unwrap().starts_with("postgres:"));
    let migrate = &services["migrate"];
    let command: Vec<&str> = migrate["command"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(command, ["store", "migrate"]);
    assert_eq!(
        migrate["depends_on"]["postgres"]["condition"].as_str(),
        Some("service_healthy")
    );
    let mut states = Vec::new();
    for name in ["broker-1", "broker-2"] {
        let broker = &services[name];
        assert_eq!(
            broker["depends_on"]["migrate"]["condition"].as_str(),
            Some("service_completed_successfully"),
            "{name} starts after the migration"
        );
        let url = broker["environment"]["MNEMO_DATABASE_URL"].as_str().unwrap();
        assert!(
            url.starts_with("postgres://") && url.contains("@postgres:5432/"),
            "{url}"
        );
        let volumes: Vec<&str> = broker["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let state = volumes
            .iter()
            .find(|v| v.ends_with(&format!(":{STATE}")))
            .unwrap()
            .to_string();
        states.push(state);
    }
    assert_ne!(states[0], states[1], "one state folder per broker (mnemo.lock)");
    let lb = compose["configs"]["lb"]["content"].as_str().unwrap();
    assert!(lb.contains("broker-1:8443") && lb.contains("broker-2:8443") && lb.contains("proxy_next_upstream"));
}

#[test]
fn the_kubernetes_postgres_example_runs_several_brokers_after_a_migration_job() {
    let text = read("kubernetes/mnemo-postgres.yaml");
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    let kind = |k: &str| {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(k))
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let config_text = kind("ConfigMap")["data"]["config.json"].as_str().unwrap();
    let config = AppConfig::parse(config_text, Path::new("ConfigMap mnemo-pg-config")).unwrap();
    assert_eq!(config.store.kind, mnemo::config::StoreKind::Postgres);
    assert_eq!(
        config.channels.telegram.mode, "webhook",
        "polling hands updates to one broker only"
    );
    let secret = kind("Secret")["stringData"].as_mapping().unwrap().clone();
    for name in [
        config.store.url_env.as_str(),
        config.channels.telegram.token_env.as_str(),
        config.channels.telegram.webhook_secret_env.as_str(),
        config.model.as_ref().unwrap().api_key_env().unwrap(),
    ] {
        assert!(secret.contains_key(name), "the Secret holds {name}");
    }
    let job = kind("Job");
    let args: Vec<&str> = job["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.ends_with(&["store", "migrate"]), "{args:?}");
    let deployment = kind("Deployment");
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() >= 2);
    let pod = &deployment["spec"]["template"]["spec"];
    let webhook_port = config.channels.telegram.webhook_listen_addr().unwrap().port();
    let ports = pod["containers"][0]["ports"].as_sequence().unwrap();
    assert!(
        ports
            .iter()
            .any(|p| p["name"].as_str() == Some("webhook")
                && p["containerPort"].as_u64() == Some(u64::from(webhook_port))),
        "the webhook port is the configured webhookListen"
    );
    // On Postgres the access rules are in the database, shared by the
    // brokers: no per-pod access.json to copy in (a broker would not read it).
    assert!(
        kind("ConfigMap")["data"].get("access.json").is_none(),
        "an access.json in the ConfigMap would be ignored on the Postgres store"
    );
    assert!(
        pod.get("initContainers").is_none(),
        "nothing to copy into the scratch state folder"
    );
    assert!(
        text.contains("mnemo --config /etc/mnemo/config.json access pair telegram"),
        "the header says how to change the rules"
    );
}
