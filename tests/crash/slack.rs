#![cfg(feature = "slack")]
//! Crashes over Slack in Socket Mode: the adapter acks an envelope only once
//! the broker has stored its message, and the fake, as Slack does, delivers
//! every envelope nobody acked again, on whichever connection is open (the
//! restarted bot's). So besides what every crash test holds (`tests/crash.rs`),
//! every envelope is acked in the end and a redelivered message already
//! stored is neither stored nor answered again.

use super::{Chats, Platform, Question, answered_within, kill_mid_burst, settle_and_judge, start_for_a_burst};
use mnemo_channels::slack::THINKING;
use mnemo_testkit::slack::{
    APP_TOKEN, BOT_TOKEN, FakeSlack, SLACK_RETRIES, dm_event, events_envelope, retry_envelope_id,
};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Slack in Socket Mode against `fake`, streaming.
fn slack(fake: &FakeSlack) -> Platform {
    Platform {
        channel: "slack",
        config: json!({ "enabled": true, "mode": "socket", "apiUrl": fake.api_url, "streaming": true }),
        env: &[("SLACK_BOT_TOKEN", BOT_TOKEN), ("SLACK_APP_TOKEN", APP_TOKEN)],
        secrets: &[BOT_TOKEN, APP_TOKEN],
    }
}

impl Chats for FakeSlack {
    fn shows(&self, chat: &str) -> Vec<String> {
        self.messages_in(chat)
    }

    fn outgoing(&self) -> usize {
        self.calls_to("chat.postMessage").len() + self.calls_to("chat.update").len()
    }
}

/// Users in the burst, each in a direct message with the bot.
const USERS: usize = 25;
/// Messages each user sends before the kill's burst, and in it.
const FIRST_BURST: usize = 10;
const SECOND_BURST: usize = 8;
/// The second burst's envelopes come one every 8 ms (1.6 s for 200), so
/// the kill, a second in, lands while they are arriving: some handed to the
/// bot and not yet acked, some not yet sent.
const SECOND_BURST_PACE: Duration = Duration::from_millis(8);
/// Every burst message carries it: the one word the logs must not show.
const CANARY: &str = "slackburstcanary";
/// How long the fake waits for an ack before it sends the envelope again:
/// Slack's own deadline (it then retries at once, after one minute and
/// after five; the test cannot wait minutes).
const ACK_DEADLINE: Duration = Duration::from_secs(3);
/// No copy of its envelope acked, though the bot ran until quiet.
const NEVER_ACKED: &str = "envelope never acked";

/// One question of the burst: user `n`'s message `i`.
#[derive(Clone, Copy)]
struct Asked {
    n: usize,
    i: usize,
    /// Seconds since the epoch when the test began: Slack's `ts` is the
    /// message's time, which the broker stores and judges stale by.
    epoch: i64,
}

impl Asked {
    fn ts(self) -> String {
        format!("{}.{:06}", self.epoch, self.i + 1)
    }
    fn envelope_id(self) -> String {
        format!("env-{}-{}", self.n, self.i)
    }
    /// The envelope ids of every copy the fake may send.
    fn envelope_ids(self) -> Vec<String> {
        let first = self.envelope_id();
        let retries = (1..=SLACK_RETRIES).map(|attempt| retry_envelope_id(&first, attempt));
        std::iter::once(first.clone()).chain(retries).collect()
    }
}

impl Question for Asked {
    fn user(self) -> String {
        format!("U{}", 7_000 + self.n)
    }
    /// The DM's channel id, as [`dm_event`] makes it.
    fn chat(self) -> String {
        format!("D{}", self.user())
    }
    /// Slack's `msg_id` in the broker: `<channel>:<ts>`.
    fn msg_id(self) -> String {
        format!("{}:{}", self.chat(), self.ts())
    }
    fn text(self) -> String {
        format!("u{} q{} {CANARY}", self.n, self.i)
    }
}

/// Message `i` of every user for each `i` of `messages` (user by user,
/// message by message).
fn questions(messages: std::ops::Range<usize>, epoch: i64) -> Vec<Asked> {
    messages
        .flat_map(|i| (0..USERS).map(move |n| Asked { n, i, epoch }))
        .collect()
}

/// Sends `q` as an envelope Slack delivers again until it is acked.
fn send(fake: &FakeSlack, q: Asked) {
    let event = dm_event(&q.user(), &q.ts(), &q.text());
    let envelope = events_envelope(&q.envelope_id(), &format!("Ev{}x{}", q.n, q.i), event);
    fake.send_until_acked_across_restarts(envelope, ACK_DEADLINE);
}

/// Sends `questions` in the background, one every `every`, as the messages
/// of a busy workspace come; the counter says how many are out.
fn stream(fake: &FakeSlack, questions: &[Asked], every: Duration) -> Arc<AtomicUsize> {
    let out = Arc::new(AtomicUsize::new(0));
    let (fake, questions, counter) = (fake.clone(), questions.to_vec(), out.clone());
    tokio::spawn(async move {
        for q in questions {
            send(&fake, q);
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(every).await;
        }
    });
    out
}

/// The envelope ids acked so far.
fn acked(fake: &FakeSlack) -> HashSet<String> {
    fake.acks()
        .iter()
        .filter_map(|a| a["envelope_id"].as_str().map(str::to_string))
        .collect()
}

fn any_copy_acked(acked: &HashSet<String>, q: Asked) -> bool {
    q.envelope_ids().iter().any(|id| acked.contains(id))
}

/// Messages the DMs of `questions` still show that are no answer to them:
/// placeholders, and answers cut mid-stream by the kill (the restart answers
/// in a new message and cannot know the old one). Told, not judged.
fn left_in_dms(fake: &FakeSlack, questions: &[Asked]) -> (usize, usize) {
    let mut answers: HashMap<String, HashSet<String>> = HashMap::new();
    for q in questions {
        answers.entry(q.chat()).or_default().insert(q.answer());
    }
    let left: Vec<String> = answers
        .iter()
        .flat_map(|(dm, answers)| fake.messages_in(dm).into_iter().filter(|t| !answers.contains(t)))
        .collect();
    let placeholders = left.iter().filter(|t| *t == THINKING).count();
    (placeholders, left.len() - placeholders)
}

/// 25 users write 10 direct messages each, have them answered, then 8 more
/// each; the bot is killed about a second into the second burst and started
/// again. With [`start_for_a_burst`]'s slow model and a live reply edited at
/// most every 1.2 s, each user's turns take about a second and the kill
/// finds envelopes not yet acked, questions stored and not answered, and
/// answers half shown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_slack_burst_loses_no_message_and_leaves_none_unanswered() {
    let began = Instant::now();
    let epoch = chrono::Utc::now().timestamp();
    let fake = FakeSlack::start().await;
    let (_model, mut broker) = start_for_a_burst(slack(&fake)).await;
    fake.wait_until("the bot's Socket Mode connection", |f| f.connections() == 1)
        .await;

    let first = questions(0..FIRST_BURST, epoch);
    for &q in &first {
        send(&fake, q);
    }
    let first_answered = answered_within(&fake, &first, Duration::from_secs(60)).await;
    let second = questions(FIRST_BURST..FIRST_BURST + SECOND_BURST, epoch);
    let out = stream(&fake, &second, SECOND_BURST_PACE);
    let kill = kill_mid_burst(&mut broker, &fake, &second, Duration::from_millis(1000)).await;
    let every: Vec<Asked> = first.iter().chain(&second).copied().collect();
    // Read after the kill: every ack the fake holds was sent by a bot that
    // had stored the message before it.
    let acked_at_kill = acked(&fake);
    let acked_not_stored = kill.not_stored(every.iter().copied().filter(|q| any_copy_acked(&acked_at_kill, *q)));
    let unanswered = kill.unanswered(every.iter().copied());
    // The second burst's envelopes out by the time the bot was dead, and of
    // them those no copy of which was acked: left to Slack's redelivery,
    // which must neither store nor answer again the ones already stored.
    let sent = out.load(Ordering::SeqCst);
    let unacked: Vec<Asked> = second[..sent]
        .iter()
        .copied()
        .filter(|q| !any_copy_acked(&acked_at_kill, *q))
        .collect();
    let stored_unacked = unacked.iter().filter(|q| kill.stored(**q)).count();

    let restarted_at = chrono::Utc::now();
    broker.start();
    fake.wait_until("the restarted bot's connection", |f| f.connections() == 2)
        .await;
    let mut verdict = settle_and_judge(&mut broker, &fake, every.iter().copied(), restarted_at).await;
    let acked = acked(&fake);
    for &q in every.iter().filter(|q| !any_copy_acked(&acked, **q)) {
        verdict.file(NEVER_ACKED, &q.msg_id());
    }
    let retries_acked = acked.iter().filter(|id| id.contains("-retry")).count();
    let (placeholders, cut_answers) = left_in_dms(&fake, &every);

    eprintln!(
        "slack crash burst: {verdict}; {} envelopes never acked, {retries_acked} retried envelopes acked; \
         {first_answered} of {} first-burst answers out before the second burst; {kill}, {sent} of its envelopes \
         sent, {} of them unacked ({stored_unacked} of those stored), {} acked but not stored, {unanswered} stored \
         questions unanswered; {placeholders} placeholders and {cut_answers} cut answers left in the DMs; {:.1} s",
        verdict.tally(NEVER_ACKED),
        first.len(),
        unacked.len(),
        acked_not_stored.len(),
        began.elapsed().as_secs_f64(),
    );
    verdict.assert_held(&broker, CANARY, "acked to Slack", &acked_not_stored);
}
