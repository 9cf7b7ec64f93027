#![cfg(any(feature = "telegram", feature = "slack"))]
//! Crashes, end to end (issue 42, "acknowledged before stored"): the real
//! `mnemo run` binary on the file store, against a fake platform and the
//! fake model, killed with SIGKILL and started again on the same state
//! folder. A message is stored on intake before the platform is told it was
//! delivered (Telegram polling: the offset the bot confirms, below which the
//! fake Bot API, like Telegram, forgets every update; Slack Socket Mode: the
//! envelope's ack, without which the fake, like Slack, delivers it again on
//! whichever connection is open), a repeated delivery of a stored message is
//! neither stored nor answered twice, and a start answers every stored
//! question nothing settles. So: nothing confirmed is lost, nothing is stored
//! or answered twice, and every question ends with its `re-` record (its
//! answer, or a notice) in the user's short-term log and its answer in its
//! chat.
//!
//! This file is the harness both platforms share: [`Broker`] runs, kills and
//! reads `mnemo run` for a [`Platform`]; a burst test drives it through
//! [`start_for_a_burst`], [`kill_mid_burst`] and [`settle_and_judge`], which
//! read the fake through [`Chats`] and each question through [`Question`].
//! `telegram` replays the report (a burst killed mid-way, streaming
//! and not) and drives one restart point at a time; `slack` replays the burst
//! over Socket Mode. It never talks to a real platform.

mod slack;
mod telegram;

use crate::support;
use chrono::{DateTime, Utc};
use mnemo_sessions::{Layout, Record, Role, SafeName};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Display;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use support::FakeModel;

/// What [`Broker`] needs to know of the platform a test runs against.
struct Platform {
    /// The channel's name: its key under `channels` and its folder in the
    /// state.
    channel: &'static str,
    /// Its `channels.<channel>` config section.
    config: Value,
    /// The environment `mnemo run` reads the channel's tokens from.
    env: &'static [(&'static str, &'static str)],
    /// What no log may show: those tokens.
    secrets: &'static [&'static str],
}

/// `mnemo run` on one state folder, killed and started again by the test;
/// killed for good if a test fails before stopping it.
struct Broker {
    dir: tempfile::TempDir,
    config: PathBuf,
    platform: Platform,
    child: Option<Child>,
    /// Runs so far: each logs to its own `stderr-<run>.log`.
    runs: usize,
}

impl Broker {
    /// A state folder whose config runs `platform` only and points the model
    /// at `model_url`, with `limits`; direct messages open. The short-term
    /// log is made big enough to hold a whole test: a burst user's 25
    /// questions and 25 answers would reach the default fold threshold and
    /// window (50), and a fold mid-test would move records to the archive
    /// and the summary. Kept out of it, every record stays in
    /// `messages.jsonl`, where the tests count them.
    fn new(platform: Platform, model_url: &str, limits: Value) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let config = json!({
            "stateDir": state,
            "model": { "provider": "openai", "baseUrl": model_url, "apiKeyEnv": "MNEMO_TEST_KEY",
                       "model": "fake-1", "timeoutSecs": 30, "maxRetries": 0 },
            "channels": { "console": { "enabled": false }, platform.channel: platform.config.clone() },
            "limits": limits,
            "logging": { "level": "trace" },
        });
        let path = dir.path().join("config.json");
        std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
        support::open_access(&state, platform.channel, &[]);
        let sessions = json!({ "stm": { "maxMessages": 500 }, "compacting": { "threshold": 400 } });
        let layout = Layout::new(&state, platform.channel);
        std::fs::write(layout.config_path(), serde_json::to_vec_pretty(&sessions).unwrap()).unwrap();
        Broker {
            dir,
            config: path,
            platform,
            child: None,
            runs: 0,
        }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn start(&mut self) {
        assert!(self.child.is_none(), "already running");
        self.runs += 1;
        let stderr = std::fs::File::create(self.dir.path().join(format!("stderr-{}.log", self.runs))).unwrap();
        let child = support::mnemo(&self.config, self.dir.path())
            .arg("run")
            .envs(self.platform.env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// `kill -9`: no shutdown, no drain, whatever was in flight cut.
    async fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap(); // SIGKILL on Unix
        tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap();
    }

    /// SIGTERM, then a clean exit.
    async fn stop(&mut self) {
        let child = self.child.take().expect("running");
        support::sigterm(child.id());
        let status = tokio::task::spawn_blocking(move || {
            let mut child = child;
            child.wait()
        })
        .await
        .unwrap()
        .unwrap();
        assert!(status.success(), "mnemo run exits 0 after SIGTERM: {status}");
    }

    /// Every run's stderr (traced at the finest level) and the log files.
    fn logs(&self) -> Vec<String> {
        let stderr = (1..=self.runs).map(|run| self.dir.path().join(format!("stderr-{run}.log")));
        let files = std::fs::read_dir(self.state().join("logs"))
            .into_iter()
            .flatten()
            .filter_map(|e| Some(e.ok()?.path()));
        stderr
            .chain(files)
            .filter_map(|path| std::fs::read(path).ok())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .collect()
    }

    /// No log shows any of `texts` (message texts, or a word all of them
    /// carry) or any of the platform's secrets.
    fn assert_logs_hold_none_of(&self, texts: &[&str]) {
        for log in self.logs() {
            for secret in self.platform.secrets {
                assert!(!log.contains(secret), "a log shows a token");
            }
            for text in texts {
                assert!(!log.contains(text), "a log shows message text: {text}");
            }
        }
    }

    /// The user's records, oldest first: archived batches (none with the
    /// sizes [`Broker::new`] sets, read all the same), then the short-term
    /// log; and how many lines of it were not whole records.
    fn records(&self, user: impl Display) -> (Vec<Record>, usize) {
        let layout = Layout::new(self.state(), self.platform.channel);
        let name = SafeName::of(&user.to_string());
        let mut batches: Vec<PathBuf> = std::fs::read_dir(layout.archive_dir(&name))
            .into_iter()
            .flatten()
            .filter_map(|e| Some(e.ok()?.path()))
            .collect();
        batches.sort();
        let mut text = String::new();
        for batch in batches {
            let file = std::fs::File::open(batch).unwrap();
            std::io::Read::read_to_string(&mut flate2::read::MultiGzDecoder::new(file), &mut text).unwrap();
        }
        text.push_str(&std::fs::read_to_string(layout.messages_path(&name)).unwrap_or_default());
        let mut torn = 0;
        let records = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| serde_json::from_str(l).inspect_err(|_| torn += 1).ok())
            .collect();
        (records, torn)
    }

    /// Writes `records` as the user's short-term log, before a start.
    // Only the Telegram tests seed a log so far.
    #[cfg_attr(not(feature = "telegram"), allow(dead_code))]
    fn write_log(&self, user: impl Display, records: &[Record]) {
        let layout = Layout::new(self.state(), self.platform.channel);
        let path = layout.messages_path(&SafeName::of(&user.to_string()));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let lines: String = records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap() + "\n")
            .collect();
        std::fs::write(path, lines).unwrap();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn count(records: &[Record], role: Role, msg_id: &str) -> usize {
    records.iter().filter(|r| r.role == role && r.msg_id == msg_id).count()
}

/// A fake platform, as the harness reads what the bot did there.
trait Chats {
    /// The texts `chat` shows now (each message's last edit), in order.
    fn shows(&self, chat: &str) -> Vec<String>;
    /// Messages the bot has sent and edits it has made so far.
    fn outgoing(&self) -> usize;
}

/// One question of a burst, as the harness finds it in the store and in
/// its chat.
trait Question: Copy {
    /// The store's name for the user who asks it.
    fn user(self) -> String;
    /// The chat that shows its answer.
    fn chat(self) -> String;
    /// The broker's id for it; its answer is stored as `re-<msg_id>`.
    fn msg_id(self) -> String;
    fn text(self) -> String;
    /// What the fake model answers, and the chat shows in the end.
    fn answer(self) -> String {
        format!("echo: {}", self.text())
    }
}

/// Waits until the bot has sent and edited nothing for `quiet`, at most
/// `bound`; whether it went quiet.
async fn quiet_for(chats: &impl Chats, quiet: Duration, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    let (mut seen, mut since) = (chats.outgoing(), Instant::now());
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = chats.outgoing();
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if since.elapsed() >= quiet {
            return true;
        }
    }
    false
}

/// How many of `questions` their chats show answered in full (each chat
/// read once).
fn answered<Q: Question>(chats: &impl Chats, questions: &[Q]) -> usize {
    let mut by_chat: HashMap<String, HashSet<String>> = HashMap::new();
    for q in questions {
        by_chat.entry(q.chat()).or_default().insert(q.answer());
    }
    by_chat
        .iter()
        .map(|(chat, answers)| {
            let shown: HashSet<String> = chats.shows(chat).into_iter().collect();
            answers.intersection(&shown).count()
        })
        .sum()
}

/// Waits until every one of `questions` is answered, at most `bound`; how
/// many are.
async fn answered_within<Q: Question>(chats: &impl Chats, questions: &[Q], bound: Duration) -> usize {
    let deadline = Instant::now() + bound;
    while answered(chats, questions) < questions.len() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    answered(chats, questions)
}

/// The fake model for a burst, and `mnemo run` for `platform` started
/// against it. The model takes 30 ms a call so queues form and streams in
/// 8-character pieces, so a streamed turn lasts and a kill finds answers
/// half shown; the rate limit is off and each queue holds the whole burst,
/// so nothing is refused for flooding.
async fn start_for_a_burst(platform: Platform) -> (FakeModel, Broker) {
    let (model, model_url) = FakeModel::start().await;
    model.set_delay(Duration::from_millis(30));
    model.stream_slowly(8, Duration::from_millis(20));
    let limits = json!({ "userMessagesPerMinute": 0, "userQueueDepth": 30 });
    let mut broker = Broker::new(platform, &model_url, limits);
    broker.start();
    (model, broker)
}

/// What a kill mid-burst left, read from the state folder before the
/// restart.
struct AtKill {
    /// Answers to the burst its chats showed in full.
    shown: usize,
    /// Questions in the burst.
    asked: usize,
    /// How long after the burst began.
    after: Duration,
    /// Each user's records, by the store's name for the user.
    logs: HashMap<String, Vec<Record>>,
}

/// `kill -9` once `burst` (just begun) is being answered: `due` into it if
/// one of its answers is out by then, at once if half of them are.
async fn kill_mid_burst<Q: Question>(broker: &mut Broker, chats: &impl Chats, burst: &[Q], due: Duration) -> AtKill {
    let began = Instant::now();
    let shown = loop {
        let shown = answered(chats, burst);
        if (began.elapsed() >= due && shown > 0) || shown >= burst.len() / 2 {
            break shown;
        }
        assert!(began.elapsed() < mnemo_testkit::PATIENCE, "no answer to the burst came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    broker.kill().await;
    let after = began.elapsed();
    assert!(shown < burst.len(), "the kill came after the burst was answered");
    let users: HashSet<String> = burst.iter().map(|q| q.user()).collect();
    let logs = users
        .into_iter()
        .map(|user| {
            let records = broker.records(&user).0;
            (user, records)
        })
        .collect();
    AtKill {
        shown,
        asked: burst.len(),
        after,
        logs,
    }
}

/// The kill in a phrase, for the test's summary line.
impl Display for AtKill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (after, shown, asked) = (self.after.as_secs_f64(), self.shown, self.asked);
        write!(
            f,
            "killed {after:.1} s into it with {shown} of {asked} of its answers out"
        )
    }
}

impl AtKill {
    fn stored(&self, q: impl Question) -> bool {
        count(&self.logs[&q.user()], Role::User, &q.msg_id()) > 0
    }

    /// The ids of those of `delivered` (questions the platform was told
    /// were delivered) that are not stored, in order: the loss.
    fn not_stored<Q: Question>(&self, delivered: impl IntoIterator<Item = Q>) -> Vec<String> {
        let mut ids: Vec<String> = delivered
            .into_iter()
            .filter(|q| !self.stored(*q))
            .map(|q| q.msg_id())
            .collect();
        ids.sort();
        ids
    }

    /// How many of `questions` are stored without an answer: the restart's
    /// work.
    fn unanswered<Q: Question>(&self, questions: impl IntoIterator<Item = Q>) -> usize {
        let answered = |q: Q| count(&self.logs[&q.user()], Role::Assistant, &format!("re-{}", q.msg_id())) > 0;
        questions
            .into_iter()
            .filter(|q| self.stored(*q) && !answered(*q))
            .count()
    }
}

// What can be wrong with a question of a burst in the end.
const LOST: &str = "lost";
const DUPLICATED: &str = "duplicated";
const UNANSWERED: &str = "unanswered";
const NOTICE: &str = "answered with a notice";
const ANSWER_TWICE: &str = "answer stored twice";
/// An answer stored before the kill whose chat never showed it in full: it
/// settles its question, so the restart does not answer it again. An
/// answer is stored right after it is shown, so this must not happen.
const STORED_NOT_SHOWN: &str = "answer stored before the kill, never shown in full";
const NOT_SHOWN: &str = "answer not shown in full";
const SHOWN_TWICE: &str = "answer shown twice";

/// Every question of a burst judged from the state folder and the chats,
/// once the restarted broker has stopped.
#[derive(Default)]
struct Verdict {
    /// Questions judged.
    asked: usize,
    /// Questions stored exactly once.
    stored: usize,
    /// Answers stored by the restarted broker.
    answered_after_restart: usize,
    /// Lines of the short-term logs that are not whole records.
    torn: usize,
    /// Answers shown just before the kill and not stored yet, so answered
    /// (and shown) again after the restart: at most the turns showing an
    /// answer at that instant.
    shown_again: usize,
    /// Whether the restarted bot went quiet before it was stopped.
    went_quiet: bool,
    /// The ids of the questions with each problem, in order.
    problems: BTreeMap<&'static str, Vec<String>>,
}

/// Waits until the restarted bot has sent nothing for 5 s (120 s at most),
/// stops it, and judges `questions`; `restarted_at` is the restart's time.
async fn settle_and_judge<Q: Question>(
    broker: &mut Broker,
    chats: &impl Chats,
    questions: impl IntoIterator<Item = Q>,
    restarted_at: DateTime<Utc>,
) -> Verdict {
    let went_quiet = quiet_for(chats, Duration::from_secs(5), Duration::from_secs(120)).await;
    broker.stop().await;
    let mut verdict = Verdict {
        went_quiet,
        ..Verdict::default()
    };
    let mut logs: HashMap<String, Vec<Record>> = HashMap::new();
    let mut shows: HashMap<String, Vec<String>> = HashMap::new();
    for q in questions {
        let log = logs.entry(q.user()).or_insert_with_key(|user| {
            let (log, torn) = broker.records(user);
            verdict.torn += torn;
            log
        });
        let shown = shows.entry(q.chat()).or_insert_with_key(|chat| chats.shows(chat));
        let times_shown = shown.iter().filter(|t| **t == q.answer()).count();
        verdict.judge(q, log, times_shown, restarted_at);
    }
    verdict
}

impl Verdict {
    /// Files `q`'s problems, given its user's log and how many messages of
    /// its chat show its answer.
    fn judge(&mut self, q: impl Question, log: &[Record], times_shown: usize, restarted_at: DateTime<Utc>) {
        self.asked += 1;
        let id = q.msg_id();
        let mut problems = Vec::new();
        match count(log, Role::User, &id) {
            0 => problems.push(LOST),
            1 => self.stored += 1,
            _ => problems.push(DUPLICATED),
        }
        let reply_id = format!("re-{id}");
        let answers: Vec<&Record> = log
            .iter()
            .filter(|r| r.role == Role::Assistant && r.msg_id == reply_id)
            .collect();
        match answers.as_slice() {
            [] => problems.push(UNANSWERED),
            [answer] if answer.text != q.answer() => problems.push(NOTICE),
            [answer] => self.answered_after_restart += usize::from(answer.ts >= restarted_at),
            _ => problems.push(ANSWER_TWICE),
        }
        let stored_before_kill = answers.first().is_some_and(|a| a.ts < restarted_at);
        match times_shown {
            0 if stored_before_kill => problems.push(STORED_NOT_SHOWN),
            0 => problems.push(NOT_SHOWN),
            1 => {}
            // Shown in the instant before the kill, before its answer was
            // stored (an answer is stored right after it is shown): the
            // restart answers it again.
            2 if !stored_before_kill && !answers.is_empty() => self.shown_again += 1,
            _ => problems.push(SHOWN_TWICE),
        }
        for what in problems {
            self.file(what, &id);
        }
    }

    /// Files a problem of the question `id`.
    fn file(&mut self, what: &'static str, id: &str) {
        self.problems.entry(what).or_default().push(id.to_string());
    }

    /// How many questions have the problem `what`.
    fn tally(&self, what: &str) -> usize {
        self.problems.get(what).map_or(0, Vec::len)
    }

    /// What a burst test holds in the end, in this order: no log shows a
    /// message text (each carries `canary`) or a token; nothing the
    /// platform was `told` is delivered was `not_stored` at the kill; no
    /// short-term log line is torn; no question has a problem; the bot went
    /// quiet; and few answers were shown twice.
    fn assert_held(&self, broker: &Broker, canary: &str, told: &str, not_stored: &[String]) {
        broker.assert_logs_hold_none_of(&[canary]);
        assert!(not_stored.is_empty(), "{told} before it was stored: {not_stored:?}");
        assert_eq!(self.torn, 0, "lines of a short-term log are not whole records");
        let first_ids: BTreeMap<_, _> = self
            .problems
            .iter()
            .map(|(what, ids)| (*what, &ids[..ids.len().min(20)]))
            .collect();
        assert!(
            first_ids.is_empty(),
            "questions by problem (the first 20 ids): {first_ids:?}"
        );
        assert!(self.went_quiet, "the bot was still sending 120 s after the restart");
        // Only a turn between showing its answer and storing it at the kill's
        // instant: at most one per model slot (`maxConcurrentModelCalls`, 8).
        assert!(self.shown_again <= 8, "{} answers shown twice", self.shown_again);
    }
}

/// The verdict in a sentence, for the test's summary line.
impl Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} stored once, {} lost, {} duplicated, {} unanswered, {} answered after the restart; {} answers \
             not shown in full ({} of them stored before the kill), {} shown twice ({} shown at the kill and again \
             after it), {} answers stored twice, {} notices; {} torn lines; quiet after the restart: {}",
            self.stored,
            self.asked,
            self.tally(LOST),
            self.tally(DUPLICATED),
            self.tally(UNANSWERED),
            self.answered_after_restart,
            self.tally(NOT_SHOWN) + self.tally(STORED_NOT_SHOWN),
            self.tally(STORED_NOT_SHOWN),
            self.tally(SHOWN_TWICE) + self.shown_again,
            self.shown_again,
            self.tally(ANSWER_TWICE),
            self.tally(NOTICE),
            self.torn,
            self.went_quiet,
        )
    }
}
