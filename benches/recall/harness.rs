//! The broker side of the recall benchmark: the real `App` over a temp
//! state folder, a stand-in channel that signals each reply, and an
//! instant in-process model that records every chat request it is asked
//! (the summarizer's JSON requests get a fixed summary). Nothing here
//! judges recall; it only plays conversations through the broker.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mnemo::app::{App, AppParts};
use mnemo::model::{DeltaStream, Model, ModelError, ModelReply, ModelRequest, ModelSummarizer, ReplyFormat};
use mnemo_channels::{Channel, ChannelError, ChatKind, Inbound, Outbound, Shutdown};
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, mpsc};

/// What one chat request carried, flattened, and its estimated tokens.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub text: String,
    pub tokens: usize,
}

/// Answers at once; remembers the last chat request.
#[derive(Default)]
struct InstantModel {
    last: Mutex<Seen>,
}

#[async_trait]
impl Model for InstantModel {
    async fn complete(&self, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        if request.format == ReplyFormat::Json {
            return Ok(ModelReply {
                text: r#"{"summary": "The user talked about their days.", "facts": []}"#.into(),
                usage: None,
                tool_calls: Vec::new(),
            });
        }
        let mut text = request.context.system.clone();
        for turn in &request.context.turns {
            text.push('\n');
            text.push_str(&turn.content);
        }
        text.push('\n');
        text.push_str(&request.message);
        let tokens = text.chars().count().div_ceil(4);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Seen { text, tokens };
        Ok(ModelReply {
            text: "Noted.".into(),
            usage: None,
            tool_calls: Vec::new(),
        })
    }
    async fn stream(&self, _: &ModelRequest) -> Result<DeltaStream, ModelError> {
        Err(ModelError::Protocol {
            detail: "not used".into(),
        })
    }
    fn describe(&self) -> String {
        "instant".into()
    }
}

/// Signals each reply it is asked to send.
struct Signal(Notify);

#[async_trait]
impl Channel for Signal {
    fn name(&self) -> &str {
        "bench"
    }
    fn max_message_chars(&self) -> usize {
        4000
    }
    async fn receive(&self, _: mpsc::Sender<Inbound>, _: Shutdown) -> Result<(), ChannelError> {
        Ok(())
    }
    async fn send(&self, _: Outbound) -> Result<(), ChannelError> {
        self.0.notify_one();
        Ok(())
    }
}

/// A running broker for one benchmark mode.
pub struct Broker {
    app: App,
    model: Arc<InstantModel>,
    channel: Arc<Signal>,
    seq: u64,
    _dir: tempfile::TempDir,
}

impl Broker {
    /// A broker whose `sessions/config.json` is `config`, its memory in
    /// the files or, with `store`, in that (migrated) Postgres database.
    pub async fn start(config: &str, store: Option<mnemo_pg::PgStore>) -> Broker {
        let dir = tempfile::tempdir().expect("temp dir");
        let sessions = dir.path().join("channels/bench/sessions");
        std::fs::create_dir_all(&sessions).expect("sessions dir");
        std::fs::write(sessions.join("config.json"), config).expect("config");
        // Anyone may talk: in the state folder's access.json, or on
        // Postgres in the database, where a broker there reads its rules.
        match &store {
            Some(store) => {
                mnemo::access::db::edit(store, "bench", |rules| {
                    rules.dm_policy = mnemo::access::DmPolicy::Open;
                })
                .await
                .expect("the bench's open rules in the database");
            }
            None => std::fs::write(sessions.join("access.json"), r#"{"dmPolicy": "open"}"#).expect("access"),
        }
        let model = Arc::new(InstantModel::default());
        // The product's bench parts, with a model that records each request.
        let parts = AppParts {
            summarizer: Arc::new(ModelSummarizer::new(model.clone())),
            model: model.clone(),
            store,
            ..mnemo::bench::app_parts(dir.path())
        };
        let channel = Arc::new(Signal(Notify::new()));
        let app = App::new(parts, vec![channel.clone() as Arc<dyn Channel>]).expect("app");
        Broker {
            app,
            model,
            channel,
            seq: 0,
            _dir: dir,
        }
    }

    /// Computes every vector the users' history still lacks (with
    /// `recall.embeddings` on), as the background fill would by the time
    /// they ask; returns how many.
    pub async fn embed_all<'a>(&self, users: impl IntoIterator<Item = &'a str>) -> u64 {
        let recall = &self.app.memories()["bench"].recall;
        let mut stored = 0;
        for user in users {
            stored += recall
                .embed_missing(&mnemo_sessions::SafeName::of(user), &mut |_| {})
                .await
                .expect("the fake embeddings server answers");
        }
        stored
    }

    /// One turn of `user`, answered; returns what the model was asked.
    pub async fn say(&mut self, user: &str, id: &str, at: DateTime<Utc>, text: &str) -> Seen {
        self.seq += 1;
        let message = Inbound {
            channel: "bench".into(),
            user_id: user.into(),
            user_name: None,
            chat_id: format!("dm-{user}"),
            chat_kind: ChatKind::Direct,
            thread_id: None,
            msg_id: format!("{id}-{}", self.seq),
            text: text.into(),
            ts: at,
            addressed: true,
            interaction: None,
            attachments: Vec::new(),
        };
        self.app.submit(message).await;
        self.channel.0.notified().await;
        self.model.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
