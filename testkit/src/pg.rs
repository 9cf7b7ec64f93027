//! Throwaway PostgreSQL for the suites that test the Postgres store: a real
//! server, never a fake (the store's contract is SQL and its locks).
//!
//! [`database`] gives each test its own empty database on one server per
//! test process: the one `.ci/run` started (`MNEMO_TEST_PGPORT`, with
//! `MNEMO_TEST_PGHOST`, default `127.0.0.1`, user `postgres`, trust auth),
//! or else one this module starts from the machine's PostgreSQL binaries
//! (`/usr/lib/postgresql/<version>/bin`, or `pg_config --bindir`). A test
//! that stops and starts its server (the database going away mid-turn)
//! takes a [`Cluster`] of its own.
//!
//! The server refuses to run as root, so as root the cluster runs as the
//! `postgres` system user (the package creates it). A small watcher
//! process, in its own session, stops the cluster and deletes its folder
//! when the test process is gone, however it ended. Without PostgreSQL
//! binaries the test fails and says what to install — never a skip.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A running PostgreSQL server the tests may create databases on.
#[derive(Debug)]
pub struct Cluster {
    host: String,
    port: u16,
    /// Set when this process started it (and may stop and start it).
    own: Option<Own>,
}

#[derive(Debug)]
struct Own {
    bin: PathBuf,
    data: PathBuf,
    run_as: Option<String>,
}

/// An empty database for one test: connect with [`TestDb::url`].
#[derive(Clone, Debug)]
pub struct TestDb {
    pub host: String,
    pub port: u16,
    pub name: String,
}

impl TestDb {
    /// `postgres://postgres@HOST:PORT/NAME`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@{}:{}/{}", self.host, self.port, self.name)
    }
}

/// A fresh, empty database on this process's shared server.
pub fn database() -> TestDb {
    shared().create_database()
}

// The test kit's own knob (which server to use), read once here.
#[allow(clippy::disallowed_methods)]
fn shared() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| match std::env::var("MNEMO_TEST_PGPORT") {
        Ok(port) => Cluster {
            host: std::env::var("MNEMO_TEST_PGHOST").unwrap_or_else(|_| "127.0.0.1".into()),
            port: port
                .parse()
                .unwrap_or_else(|_| panic!("MNEMO_TEST_PGPORT={port:?} is not a port number")),
            own: None,
        },
        Err(_) => Cluster::start(),
    })
}

impl Cluster {
    /// Starts a new cluster of this process's own, on a free loopback port.
    pub fn start() -> Cluster {
        let bin = bin_dir();
        let run_as = is_root().then(|| "postgres".to_string());
        let data = tempdir_for(run_as.as_deref());
        let port = free_port();
        let mut initdb = as_user(run_as.as_deref(), &bin.join("initdb"));
        initdb.args(["-D"]).arg(&data).args([
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        run(initdb, "initdb");
        let cluster = Cluster {
            host: "127.0.0.1".into(),
            port,
            own: Some(Own { bin, data, run_as }),
        };
        cluster.start_server();
        cluster.watch_parent();
        cluster
    }

    /// A fresh, empty database on this server.
    pub fn create_database(&self) -> TestDb {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "mnemo_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut create = Command::new(self.client("createdb"));
        create
            .args(["-h", &self.host, "-p", &self.port.to_string(), "-U", "postgres"])
            .arg(&name);
        run(create, "createdb");
        TestDb {
            host: self.host.clone(),
            port: self.port,
            name,
        }
    }

    /// Stops the server at once (as a crash or a lost database would): open
    /// connections break. Only for a cluster of this process's own.
    pub fn stop(&self) {
        let own = self
            .own
            .as_ref()
            .expect("only a cluster started by this test can be stopped");
        let mut stop = as_user(own.run_as.as_deref(), &own.bin.join("pg_ctl"));
        stop.args(["-D"]).arg(&own.data).args(["-m", "immediate", "-w", "stop"]);
        run(stop, "pg_ctl stop");
    }

    /// Starts a stopped server again, on the same port and data.
    pub fn start_server(&self) {
        let own = self
            .own
            .as_ref()
            .expect("only a cluster started by this test can be started");
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c max_connections=300",
            self.port,
            own.data.display()
        );
        let mut start = as_user(own.run_as.as_deref(), &own.bin.join("pg_ctl"));
        start
            .args(["-D"])
            .arg(&own.data)
            .args(["-o", &options, "-l"])
            .arg(own.data.join("server.log"))
            .args(["-w", "start"]);
        run(start, "pg_ctl start");
    }

    /// A client program: from the cluster's own binaries, else from `PATH`.
    fn client(&self, name: &str) -> PathBuf {
        match &self.own {
            Some(own) => own.bin.join(name),
            None => bin_dir().join(name),
        }
    }

    /// Stops the cluster and removes its folder once this process is gone.
    fn watch_parent(&self) {
        let own = self.own.as_ref().expect("own cluster");
        let stop = format!(
            "{} {} -D {} -m immediate stop >/dev/null 2>&1",
            own.run_as
                .as_ref()
                .map(|u| format!("runuser -u {u} --"))
                .unwrap_or_default(),
            own.bin.join("pg_ctl").display(),
            own.data.display()
        );
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; {stop}; rm -rf {data}",
            pid = std::process::id(),
            data = own.data.display()
        );
        // Not waited for: it outlives this process on purpose.
        #[allow(clippy::zombie_processes)]
        Command::new("setsid")
            .args(["sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("setsid (util-linux) runs the cluster's watcher");
    }
}

/// The folder of the PostgreSQL server binaries: the newest under
/// `/usr/lib/postgresql`, else `pg_config --bindir`.
fn bin_dir() -> PathBuf {
    let debian = std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|dir| {
        dir.filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .filter(|bin| bin.join("initdb").is_file())
            .max_by_key(|bin| {
                bin.parent()
                    .and_then(|v| v.file_name())
                    .and_then(|v| v.to_str())
                    .and_then(|v| v.parse::<u32>().ok())
                    .unwrap_or(0)
            })
    });
    if let Some(bin) = debian {
        return bin;
    }
    let out = Command::new("pg_config").arg("--bindir").output();
    match out {
        Ok(out) if out.status.success() => PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
        _ => panic!(
            "the Postgres store's tests need a PostgreSQL server's binaries (initdb, pg_ctl): \
             install them (Debian: `apt-get install postgresql`) or point MNEMO_TEST_PGPORT \
             (and MNEMO_TEST_PGHOST) at a server with user `postgres` and trust auth"
        ),
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A private folder for the cluster's data, owned by `user` when given.
fn tempdir_for(user: Option<&str>) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "mnemo-pg-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create the cluster's folder");
    if let Some(user) = user {
        let mut chown = Command::new("chown");
        chown.arg(user).arg(&dir);
        run(chown, "chown");
    }
    dir
}

fn as_user(user: Option<&str>, program: &Path) -> Command {
    match user {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", user, "--"]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

fn run(mut command: Command, what: &str) {
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what} could not start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether the suite must find pgvector on the server (`.ci/run` sets
/// `MNEMO_TEST_REQUIRE_PGVECTOR`, having built it when missing): a test of
/// the embeddings on Postgres then fails instead of checking only the
/// full-text fallback.
#[allow(clippy::disallowed_methods)] // the test kit reads its own settings
pub fn pgvector_required() -> bool {
    std::env::var_os("MNEMO_TEST_REQUIRE_PGVECTOR").is_some()
}
