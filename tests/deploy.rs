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

/// Every document of a multi-document YAML file under deploy/.
fn documents(file: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(&read(file))
        .map(|d| Value::deserialize(d).unwrap())
        .collect()
}

/// The one Secret a secret file holds (and nothing else).
fn secret_file(file: &str) -> Value {
    let docs = documents(file);
    assert_eq!(docs.len(), 1, "{file} holds the Secret alone");
    assert_eq!(docs[0]["kind"].as_str(), Some("Secret"), "{file}");
    docs[0].clone()
}

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
    const KNOWN: [&str; 12] = [
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
        "HEALTHCHECK",
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

    let secret_doc = secret_file("kubernetes/mnemo-secret.yaml");
    let secret = secret_doc["stringData"].as_mapping().unwrap().clone();
    let model = config.model.as_ref().unwrap();
    for name in [
        model.api_key_env().unwrap(),
        config.channels.telegram.token_env.as_str(),
    ] {
        assert!(secret.contains_key(name), "the Secret holds {name}");
    }
    assert_eq!(
        container["envFrom"][0]["secretRef"]["name"].as_str(),
        secret_doc["metadata"]["name"].as_str()
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
    let secret_doc = secret_file("kubernetes/mnemo-postgres-secret.yaml");
    let secret = secret_doc["stringData"].as_mapping().unwrap().clone();
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

/// Issue 38 item 8: the image checks its own health (`mnemo health`, no
/// shell in distroless), builds its dependencies in a layer of their own
/// before the sources are copied, and names its revision without `.git`.
#[test]
fn the_dockerfile_has_a_healthcheck_a_dependency_layer_and_a_revision_argument() {
    let lines = dockerfile();
    let health = lines
        .iter()
        .find(|(op, _)| op == "HEALTHCHECK")
        .map(|(_, a)| a.as_str())
        .expect("a HEALTHCHECK");
    assert!(health.contains(r#"CMD ["/usr/local/bin/mnemo", "health"]"#), "{health}");
    let health_verb = std::process::Command::new(env!("CARGO_BIN_EXE_mnemo"))
        .args(["health", "--help"])
        .output()
        .unwrap();
    assert!(health_verb.status.success(), "the image's check is a real verb");

    let whole_copy = lines
        .iter()
        .position(|(op, a)| op == "COPY" && a == ". .")
        .expect("the sources are copied");
    let deps_build = lines
        .iter()
        .position(|(op, a)| op == "RUN" && a.contains("stub-workspace") && a.contains("cargo build --release --locked"))
        .expect("a RUN that builds the dependencies against stubs");
    assert!(deps_build < whole_copy, "the dependency layer comes before the sources");
    // Every workspace member's manifest is in the dependency layer.
    let root: toml_like::Members =
        toml_like::members(&std::fs::read_to_string(manifest_dir().join("Cargo.toml")).unwrap());
    let copied: Vec<&str> = lines[..deps_build]
        .iter()
        .filter(|(op, _)| op == "COPY")
        .map(|(_, a)| a.as_str())
        .collect();
    for member in &root {
        assert!(
            copied.iter().any(|a| a.starts_with(&format!("{member}/Cargo.toml "))),
            "the dependency layer lacks {member}/Cargo.toml: {copied:?}"
        );
    }
    assert!(copied.iter().any(|a| a.contains("Cargo.lock")));

    let arg = lines
        .iter()
        .position(|(op, a)| op == "ARG" && a.starts_with("MNEMO_GIT_REV"));
    assert!(
        arg.is_some_and(|i| i > deps_build),
        "the revision argument comes after the dependency layer"
    );
    let build = std::fs::read_to_string(manifest_dir().join("build.rs")).unwrap();
    assert!(
        build.contains(r#"std::env::var("MNEMO_GIT_REV")"#) && build.contains("rerun-if-env-changed=MNEMO_GIT_REV"),
        "build.rs honours the build argument"
    );
    let ignore = std::fs::read_to_string(manifest_dir().join(".dockerignore")).unwrap();
    assert!(
        ignore.lines().any(|l| l.trim() == ".git"),
        "the context stays without .git"
    );
}

/// The stub script really lets cargo load the workspace from the
/// manifests alone (what the dependency layer builds).
#[test]
fn the_stub_script_makes_the_manifests_alone_a_loadable_workspace() {
    let dir = tempfile::tempdir().unwrap();
    for (op, args) in dockerfile() {
        let Some(rest) = (op == "COPY").then_some(args.as_str()).filter(|a| !a.starts_with("--")) else {
            continue;
        };
        let parts: Vec<&str> = rest.split_whitespace().collect();
        let (sources, target) = parts.split_at(parts.len() - 1);
        if sources == ["."] {
            break;
        }
        for source in sources {
            let to = if target[0].ends_with('/') && !target[0].starts_with('/') {
                dir.path().join(target[0]).join(Path::new(source).file_name().unwrap())
            } else if target[0] == "./" {
                dir.path().join(source)
            } else {
                continue; // the script itself, run from the repository
            };
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(manifest_dir().join(source), &to).unwrap();
        }
    }
    let stubbed = std::process::Command::new("sh")
        .arg(deploy("stub-workspace.sh"))
        .current_dir(dir.path())
        .status()
        .unwrap();
    assert!(stubbed.success());
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let out = std::process::Command::new(cargo)
        // `fetch` loads every manifest with all its targets (a missing
        // stub fails it), and offline it downloads nothing. For this
        // machine's target only, as the image's build: crates the lock names
        // for other platforms or cfgs (tracing-core's `valuable`) are in no
        // fresh machine's cache.
        .args(["fetch", "--offline", "--locked", "--target", &host_target()])
        .current_dir(dir.path())
        .env("CARGO_TARGET_DIR", dir.path().join("target"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The target triple rustc builds for on this machine (`rustc -vV`).
fn host_target() -> String {
    let out = std::process::Command::new("rustc").arg("-vV").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let host = text.lines().find_map(|l| l.strip_prefix("host: "));
    host.expect("rustc -vV names the host").to_string()
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace members listed in the root Cargo.toml.
mod toml_like {
    pub type Members = Vec<String>;

    pub fn members(text: &str) -> Members {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with("members"))
            .expect("a members line");
        line.split('"').skip(1).step_by(2).map(str::to_string).collect()
    }
}

/// Issue 38 item 8: every workload meets the "restricted" Pod Security
/// level (non-root, seccomp RuntimeDefault, no privilege escalation, no
/// capabilities) and has requests and limits; the Secrets live in files of
/// their own; the brokers have a PodDisruptionBudget.
#[test]
fn the_kubernetes_workloads_are_restricted_sized_and_keep_no_secret() {
    let mut budgets = 0;
    for file in ["kubernetes/mnemo.yaml", "kubernetes/mnemo-postgres.yaml"] {
        let docs = documents(file);
        assert!(
            docs.iter().all(|d| d["kind"].as_str() != Some("Secret")),
            "{file} keeps a Secret among its workloads"
        );
        for doc in &docs {
            let kind = doc["kind"].as_str().unwrap_or_default();
            if kind == "PodDisruptionBudget" {
                budgets += 1;
                let selector = &doc["spec"]["selector"]["matchLabels"];
                let target = docs
                    .iter()
                    .find(|d| {
                        d["kind"].as_str() == Some("Deployment") && &d["spec"]["selector"]["matchLabels"] == selector
                    })
                    .expect("the budget selects the brokers");
                let min = doc["spec"]["minAvailable"].as_u64().unwrap();
                assert!(
                    min >= 1 && min < target["spec"]["replicas"].as_u64().unwrap(),
                    "a drain can still proceed"
                );
            }
            if !matches!(kind, "StatefulSet" | "Deployment" | "Job") {
                continue;
            }
            let pod = &doc["spec"]["template"]["spec"];
            assert_eq!(
                pod["securityContext"]["runAsNonRoot"].as_bool(),
                Some(true),
                "{file} {kind}"
            );
            let containers = pod["containers"].as_sequence().unwrap().iter();
            let init = pod["initContainers"].as_sequence().into_iter().flatten();
            for c in containers.chain(init) {
                let name = format!("{file} {kind} {}", c["name"].as_str().unwrap_or("?"));
                let sc = &c["securityContext"];
                let seccomp = sc["seccompProfile"]["type"]
                    .as_str()
                    .or(pod["securityContext"]["seccompProfile"]["type"].as_str());
                assert_eq!(seccomp, Some("RuntimeDefault"), "{name}");
                assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false), "{name}");
                let drop: Vec<&str> = sc["capabilities"]["drop"]
                    .as_sequence()
                    .map(|d| d.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                assert_eq!(drop, ["ALL"], "{name}");
                assert!(
                    sc.get("privileged").is_none_or(|p| p.as_bool() == Some(false)),
                    "{name}"
                );
                for side in ["requests", "limits"] {
                    for what in ["cpu", "memory"] {
                        assert!(
                            c["resources"][side].get(what).is_some(),
                            "{name}: resources.{side}.{what}"
                        );
                    }
                }
                for env in c["envFrom"].as_sequence().into_iter().flatten() {
                    let wanted = env["secretRef"]["name"].as_str().unwrap();
                    let secret_file = file.replace(".yaml", "-secret.yaml");
                    assert_eq!(
                        secret_file_name(&secret_file),
                        wanted,
                        "{name} reads the Secret of {secret_file}"
                    );
                }
            }
        }
    }
    assert_eq!(budgets, 1, "the several-brokers Deployment has a PodDisruptionBudget");
}

fn secret_file_name(file: &str) -> String {
    secret_file(file)["metadata"]["name"].as_str().unwrap().to_string()
}

/// Issue 38 item 6: the load balancer retries a failed POST on the other
/// broker (nginx does so only with `non_idempotent`), as the docs say.
#[test]
fn the_load_balancer_retries_a_failed_post_on_the_other_broker_as_documented() {
    let compose: Value = serde_yaml_ng::from_str(&read("compose.postgres.yaml")).unwrap();
    let lb = compose["configs"]["lb"]["content"].as_str().unwrap();
    let retry: Vec<&str> = lb
        .lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("proxy_next_upstream "))
        .expect("proxy_next_upstream")
        .trim_end_matches(';')
        .split_whitespace()
        .collect();
    for condition in ["error", "timeout", "http_502", "http_503", "non_idempotent"] {
        assert!(
            retry.contains(&condition),
            "proxy_next_upstream lacks {condition}: {retry:?}"
        );
    }
    let docs = std::fs::read_to_string(manifest_dir().join("docs/several-brokers.md")).unwrap();
    assert!(
        docs.contains("non_idempotent") && docs.contains("idempotent by"),
        "the docs say why it is safe"
    );
}

/// Issue 38 item 6: no backup recipe writes into the state folder, where
/// it would be lost with the volume and carried by every later backup.
#[test]
fn no_backup_recipe_writes_into_the_state_folder() {
    let mut files = vec![manifest_dir().join("README.md")];
    for dir in ["docs", "deploy", "deploy/kubernetes"] {
        for entry in std::fs::read_dir(manifest_dir().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    let mut recipes = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (_, rest) in text
            .match_indices("backup --out ")
            .map(|(i, _)| text.split_at(i + "backup --out ".len()))
        {
            let out = rest.split_whitespace().next().unwrap_or_default();
            recipes += 1;
            for state in [STATE, "~/.mnemo", "$MNEMO_STATE_DIR"] {
                assert!(
                    !out.starts_with(state),
                    "{}: a backup into the state folder: {out}",
                    file.display()
                );
            }
        }
    }
    assert!(recipes >= 2, "the recipes were found");
}
