//! The store under test: a channel's memory opened as the broker opens it,
//! on the files or on Postgres, with a summarizer that learns one fact per
//! fold, and the helpers specs share (records, a user's turn, a command).

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, TimeZone, Utc};
use mnemo::app::ChannelMemory;
use mnemo_sessions::commands::{self, Caller, SessionCommand};
use mnemo_sessions::locks::LockRegistry;
use mnemo_sessions::store::{MemoryStore, UserMemory};
use mnemo_sessions::summarizer::{Fact, FactSection, SummarizeError, Summarizer, SummaryOutput, SummaryRequest};
use mnemo_sessions::{Record, Role, SafeName};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A channel's memory on one store, for one spec.
pub struct Subject {
    pub store: Arc<dyn MemoryStore>,
    /// The database, on Postgres (its access rules live there too).
    pub database: Option<mnemo_pg::PgStore>,
    pub memory: ChannelMemory,
    /// The store's summarizer.
    pub summarizer: Arc<Dentist>,
    /// The state folder (the file store's memory; exports on Postgres).
    _state: tempfile::TempDir,
}

/// Learns that the user's dentist is Dr. Okafor and that they plan a boat
/// trip (an ongoing topic), from whatever it folds; or, while `down`,
/// fails as a model that is down.
#[derive(Default)]
pub struct Dentist {
    pub down: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl Summarizer for Dentist {
    async fn summarize(&self, request: SummaryRequest<'_>) -> Result<SummaryOutput, SummarizeError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(SummarizeError::Failed("the model is down".into()));
        }
        Ok(SummaryOutput {
            summary: format!("{} messages folded", request.messages.len()),
            facts: vec![
                Fact {
                    section: FactSection::Facts,
                    key: "dentist".into(),
                    value: "Dr. Okafor on Elm Street".into(),
                },
                Fact {
                    section: FactSection::Topics,
                    key: "Boat trip".into(),
                    value: "sailing to Ischia in June".into(),
                },
            ],
        })
    }
}

/// The operator config every spec runs with: folds after 20 messages
/// (given up after 2 failures), keeps 5 in the context, at most 30
/// unfolded, idle after an hour, archived messages kept 14 days.
const CONFIG: &str = r#"{
  "compacting": { "threshold": 20, "maxFailures": 2 },
  "stm": { "contextWindow": 5, "maxMessages": 30, "maxAgeMinutes": 60 },
  "scheduler": { "archiveKeepDays": 14 }
}"#;

/// Each spec gets a channel of its own: on Postgres the specs of a run
/// share one database, keyed by channel.
static CHANNELS: AtomicUsize = AtomicUsize::new(0);

impl Subject {
    fn open(summarizer: Arc<Dentist>) -> (tempfile::TempDir, ChannelMemory) {
        let state = tempfile::tempdir().unwrap();
        let name = format!("spec{}", CHANNELS.fetch_add(1, Ordering::SeqCst));
        let layout = mnemo_sessions::Layout::new(state.path(), &name);
        mnemo_sessions::fsutil::create_private_dir_all(state.path(), layout.root()).unwrap();
        std::fs::write(layout.config_path(), CONFIG).unwrap();
        let memory =
            ChannelMemory::open(state.path(), &name, &LockRegistry::new(), chrono_tz::UTC, summarizer).unwrap();
        (state, memory)
    }

    /// The file store.
    pub async fn files() -> Subject {
        let summarizer = Arc::new(Dentist::default());
        let (state, memory) = Subject::open(summarizer.clone());
        Subject {
            store: memory.store.clone(),
            database: None,
            memory,
            summarizer,
            _state: state,
        }
    }

    /// The Postgres store, on the test kit's database. A pool of its own:
    /// a connection lives on the runtime that opened it, and each spec has
    /// its own runtime.
    pub async fn postgres() -> Subject {
        let url = mnemo_testkit::pg::database().url();
        let database = mnemo_pg::PgStore::connect(&url, 8, Duration::from_secs(10)).unwrap();
        mnemo_pg::migrate::migrate(&database).await.unwrap();
        let database = &database;
        let summarizer = Arc::new(Dentist::default());
        let (state, memory) = Subject::open(summarizer.clone());
        let memory = memory.on_postgres(database, chrono_tz::UTC, summarizer.clone(), true, "spec-broker");
        Subject {
            store: memory.store.clone(),
            database: Some(database.clone()),
            memory,
            summarizer,
            _state: state,
        }
    }

    /// Where this store keeps linked identities: the state folder's
    /// `people/links.json`, or the database's tables (shared by every
    /// spec: a spec names its accounts after its own channel).
    pub fn links(&self) -> Arc<dyn mnemo_sessions::people::LinkStore> {
        match &self.database {
            Some(database) => Arc::new(mnemo_pg::people::PgLinks::new(database.clone())),
            None => Arc::new(mnemo_sessions::people::files::FileLinks::new(self.state())),
        }
    }

    /// The same channel's memory opened again, as a restarted broker (on
    /// the files) or a second broker (on Postgres) opens it.
    pub fn another_broker(&self) -> Arc<dyn MemoryStore> {
        let name = self.store.channel().to_string();
        let summarizer = self.summarizer.clone();
        let memory = ChannelMemory::open(
            self.state(),
            &name,
            &LockRegistry::new(),
            chrono_tz::UTC,
            summarizer.clone(),
        )
        .unwrap();
        match &self.database {
            Some(database) => {
                memory
                    .on_postgres(database, chrono_tz::UTC, summarizer, true, "spec-broker-2")
                    .store
            }
            None => memory.store,
        }
    }

    /// The state folder.
    pub fn state(&self) -> &std::path::Path {
        self._state.path()
    }

    /// `user`'s memory for one turn (dropped before the next one starts:
    /// on Postgres it holds the user's lock).
    pub async fn user(&self, user: &str) -> Box<dyn UserMemory> {
        self.store.user(&SafeName::of(user)).await.unwrap()
    }

    /// Stores `n` messages of `user`, alternately theirs and answers,
    /// `text` with their number, one minute apart from `start`.
    pub async fn chat(&self, user: &str, start: i64, n: i64, text: &str) {
        let mut mine = self.user(user).await;
        for i in start..start + n {
            mine.append(&record(i, &format!("{text} {i}")), at(i)).await.unwrap();
        }
    }

    /// The reply to `/session <text>` from `user`.
    pub async fn say(&self, user: &str, text: &str) -> commands::Reply {
        let command = commands::parse(&format!("/session {text}"), None).unwrap();
        self.command(user, &command).await
    }

    /// The reply to `command` from `user`.
    pub async fn command(&self, user: &str, command: &SessionCommand) -> commands::Reply {
        let name = SafeName::of(user);
        let place = chat_place();
        let caller = Caller {
            user: &name,
            display_name: None,
            max_profile_chars: self.store.config().ltm.max_profile_chars,
            here: Some(commands::Here {
                place: &place,
                timezone: chrono_tz::UTC,
                max_reminders: MAX_REMINDERS,
            }),
        };
        let mut mine = self.store.user(&name).await.unwrap();
        commands::try_execute(mine.as_mut(), caller, command, at(100))
            .await
            .unwrap()
    }
}

/// `reminders.maxPerUser` in the specs.
pub const MAX_REMINDERS: usize = 3;

/// The chat every spec's commands come from (`c1`, as the records').
pub fn chat_place() -> mnemo_sessions::reminders::Place {
    mnemo_sessions::reminders::Place {
        chat_id: "c1".into(),
        thread_id: None,
        group: false,
        // Not the store's own: a linked account's (kept and read back).
        platform: Some("elsewhere".into()),
    }
}

/// Minute `m` of the specs' day.
pub fn at(m: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap() + TimeDelta::minutes(m)
}

/// Message `i`: a user's question when `i` is even, an answer when odd
/// (not to a question: `a<i>`).
pub fn record(i: i64, text: &str) -> Record {
    let user = i % 2 == 0;
    Record {
        ts: at(i),
        role: if user { Role::User } else { Role::Assistant },
        text: text.to_string(),
        msg_id: if user { format!("m{i}") } else { format!("a{i}") },
        channel: "spec".into(),
        thread_id: None,
        chat_id: Some("c1".into()),
        user_name: None,
    }
}

/// A user's question `msg_id` at minute `m`.
pub fn question(msg_id: &str, m: i64, text: &str) -> Record {
    Record {
        msg_id: msg_id.to_string(),
        ..record(0, text)
    }
    .at(m)
}

/// The answer to the question `msg_id`, at minute `m`.
pub fn answer(msg_id: &str, m: i64, text: &str) -> Record {
    Record {
        msg_id: mnemo_sessions::pending::reply_id(msg_id),
        ..record(1, text)
    }
    .at(m)
}

trait At {
    fn at(self, m: i64) -> Self;
}

impl At for Record {
    fn at(mut self, m: i64) -> Record {
        self.ts = at(m);
        self
    }
}
