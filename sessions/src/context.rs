//! The context given to every model call (DESIGN §4): base system prompt,
//! the user's profile, the rolling summary, the items recall found in the
//! user's older history, then the recent messages, within a token budget. Everything cut is cut visibly (a marker naming how much)
//! and logged.
//!
//! Pure: the caller reads the files; this module only assembles text and
//! never reads, writes or calls a model.

use crate::record::{Record, Role};
use std::borrow::{Borrow, Cow};

/// Header of the profile section in the system text.
pub const PROFILE_HEADER: &str = "## What you know about this user";
/// Header of the rolling-summary section in the system text.
pub const SUMMARY_HEADER: &str = "## Summary of the earlier conversation";
/// Header of the recalled items (see `crate::recall`) in the system text.
pub const RECALL_HEADER: &str = "## From earlier conversations (recalled, with dates)";
/// Header of the transcript in [`Context::flat`].
pub const TRANSCRIPT_HEADER: &str = "## Recent conversation";

/// One prior turn, as chat APIs want it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    pub role: Role,
    pub content: String,
}

/// The assembled context. The message being answered is not in here: it is
/// sent once, as the user turn, by the model backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Context {
    /// System prompt + profile + rolling summary + recalled items (+ cut
    /// markers).
    pub system: String,
    /// Recent messages, oldest first, alternating as they happened.
    pub turns: Vec<Turn>,
}

impl Context {
    /// One text for backends that take a single prompt (e.g. `claude -p
    /// --system-prompt`): the system text, then the turns as a transcript.
    pub fn flat(&self) -> String {
        let mut out = self.system.clone();
        if self.turns.is_empty() {
            return out;
        }
        out.push_str("\n\n");
        out.push_str(TRANSCRIPT_HEADER);
        for turn in &self.turns {
            out.push('\n');
            out.push_str(turn.role.label());
            out.push_str(": ");
            out.push_str(&turn.content);
        }
        out
    }

    /// The estimated size of everything in here, in tokens (chars / 4).
    pub fn estimated_tokens(&self) -> usize {
        let chars = chars(&self.system) + self.turns.iter().map(|t| chars(&t.content)).sum::<usize>();
        chars.div_ceil(4)
    }
}

/// What the caller has read for one model call. The recent records are
/// `Record`s or anything that lends one (`Arc<Record>`, as the session
/// state shares them), so the caller never copies them to build a context.
#[derive(Debug)]
pub struct ContextInput<'a, R = Record> {
    /// The operator's base system prompt; never cut.
    pub system_prompt: &'a str,
    /// The user's long-term profile (body, no frontmatter).
    pub profile: Option<&'a str>,
    /// The rolling summary (body, no frontmatter).
    pub summary: Option<&'a str>,
    /// Items recalled from older history, one per line, already within
    /// `recall.maxTokens` (see `crate::recall::Recalled::render`).
    pub recalled: Option<&'a str>,
    /// The last messages of the log, oldest first.
    pub recent: &'a [R],
    /// `msgId` of the user message being answered: left out of the turns so
    /// the model sees it once, as the user turn.
    pub answering: Option<&'a str>,
    /// `context.maxTokens`.
    pub max_tokens: usize,
}

// By hand: a derive would ask `R: Copy`, and only references are held.
impl<R> Clone for ContextInput<'_, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for ContextInput<'_, R> {}

/// What [`build_with_report`] had to cut to stay within the budget.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Oldest recent messages left out.
    pub omitted_messages: usize,
    /// Characters cut from the end of the recalled items.
    pub recalled_chars_cut: usize,
    /// Characters cut from the end of the rolling summary.
    pub summary_chars_cut: usize,
    /// Characters cut from the end of the profile.
    pub profile_chars_cut: usize,
    /// The estimate of the final context.
    pub estimated_tokens: usize,
    /// The context is still over budget: the base system prompt (never cut)
    /// plus the cut markers alone exceed it.
    pub over_budget: bool,
}

impl CutReport {
    pub fn cut_anything(&self) -> bool {
        self.omitted_messages > 0
            || self.recalled_chars_cut > 0
            || self.summary_chars_cut > 0
            || self.profile_chars_cut > 0
    }
}

/// The context for one model call; see [`build_with_report`].
pub fn build<R: Borrow<Record>>(input: &ContextInput<'_, R>) -> Context {
    build_with_report(input).0
}

/// Assembles the context within `max_tokens` (estimated as chars / 4 over
/// everything). Over budget, it first leaves out the oldest recent messages
/// (newest survive) with a `[N older messages omitted]` marker, then clips
/// the recalled items, the summary, then the profile, each with a
/// `…[+N chars]` marker. The base
/// system prompt is never cut.
pub fn build_with_report<R: Borrow<Record>>(input: &ContextInput<'_, R>) -> (Context, CutReport) {
    let budget = input.max_tokens.saturating_mul(4);
    let recent: Vec<&Record> = input
        .recent
        .iter()
        .map(<R as Borrow<Record>>::borrow)
        .filter(|r| !(r.role == Role::User && Some(r.msg_id.as_str()) == input.answering))
        .collect();
    // Borrowed until a cut needs its own copy: most turns cut nothing.
    let mut profile = input.profile.filter(|p| !p.trim().is_empty()).map(Cow::Borrowed);
    let mut summary = input.summary.filter(|s| !s.trim().is_empty()).map(Cow::Borrowed);
    let mut recalled = input.recalled.filter(|s| !s.trim().is_empty()).map(Cow::Borrowed);
    let mut report = CutReport::default();

    let turn_chars: Vec<usize> = recent.iter().map(|r| chars(&r.text)).collect();
    let fixed =
        |profile: &Option<Cow<str>>, summary: &Option<Cow<str>>, recalled: &Option<Cow<str>>, omitted: usize| {
            chars(input.system_prompt)
                + section_chars(PROFILE_HEADER, profile.as_deref())
                + section_chars(SUMMARY_HEADER, summary.as_deref())
                + section_chars(RECALL_HEADER, recalled.as_deref())
                + omitted_marker(omitted).map_or(0, |m| chars(&m))
        };

    // 1. Leave out the oldest messages.
    let mut kept_chars: usize = turn_chars.iter().sum();
    while report.omitted_messages < recent.len()
        && fixed(&profile, &summary, &recalled, report.omitted_messages) + kept_chars > budget
    {
        kept_chars -= turn_chars[report.omitted_messages];
        report.omitted_messages += 1;
    }
    if report.omitted_messages > 0 {
        tracing::info!(
            omitted = report.omitted_messages,
            kept = recent.len() - report.omitted_messages,
            max_tokens = input.max_tokens,
            "context over budget: older messages omitted"
        );
    }

    // 2. Clip the recalled items, then 3. the summary, then 4. the profile.
    let others = fixed(&profile, &summary, &None, report.omitted_messages) + kept_chars;
    if let Some((cut, room)) = clip_section(recalled.as_mut(), RECALL_HEADER, others, budget) {
        report.recalled_chars_cut = cut;
        tracing::info!(
            cut_chars = cut,
            kept_chars = room,
            max_tokens = input.max_tokens,
            "context over budget: recalled items clipped"
        );
    }
    let others = fixed(&profile, &None, &recalled, report.omitted_messages) + kept_chars;
    if let Some((cut, room)) = clip_section(summary.as_mut(), SUMMARY_HEADER, others, budget) {
        report.summary_chars_cut = cut;
        tracing::info!(
            cut_chars = cut,
            kept_chars = room,
            max_tokens = input.max_tokens,
            "context over budget: rolling summary clipped"
        );
    }
    let others = fixed(&None, &summary, &recalled, report.omitted_messages) + kept_chars;
    if let Some((cut, room)) = clip_section(profile.as_mut(), PROFILE_HEADER, others, budget) {
        report.profile_chars_cut = cut;
        tracing::info!(
            cut_chars = cut,
            kept_chars = room,
            max_tokens = input.max_tokens,
            "context over budget: profile clipped"
        );
    }

    let sections = [
        (PROFILE_HEADER, &profile),
        (SUMMARY_HEADER, &summary),
        (RECALL_HEADER, &recalled),
    ];
    let system = system_text(input.system_prompt, sections, report.omitted_messages);
    let turns = recent[report.omitted_messages..]
        .iter()
        .map(|r| Turn {
            role: r.role,
            content: r.text.clone(),
        })
        .collect();
    let context = Context { system, turns };
    report.estimated_tokens = context.estimated_tokens();
    report.over_budget = report.estimated_tokens > input.max_tokens;
    if report.over_budget {
        tracing::warn!(
            estimated_tokens = report.estimated_tokens,
            max_tokens = input.max_tokens,
            system_prompt_tokens = chars(input.system_prompt).div_ceil(4),
            "context over budget even after every cut: the base system prompt is never cut; shorten it or raise context.maxTokens"
        );
    }
    (context, report)
}

/// Clips `text`, the body of the section under `header`, to the room the
/// budget leaves beside `others` characters; `(cut, room)` when it had to.
fn clip_section(text: Option<&mut Cow<'_, str>>, header: &str, others: usize, budget: usize) -> Option<(usize, usize)> {
    let text = text?;
    if others + section_chars(header, Some(text)) <= budget {
        return None;
    }
    let room = budget.saturating_sub(others + section_chars(header, Some("")));
    Some((clip(text, room), room))
}

/// The base system prompt, then each section that has a body, then the
/// marker for the `omitted` oldest messages.
fn system_text(system_prompt: &str, sections: [(&str, &Option<Cow<'_, str>>); 3], omitted: usize) -> String {
    let mut system = String::with_capacity(
        system_prompt.len()
            + sections
                .iter()
                .map(|(_, s)| s.as_ref().map_or(0, |s| s.len() + 64))
                .sum::<usize>()
            + 40,
    );
    system.push_str(system_prompt);
    for (header, body) in sections {
        push_section(&mut system, header, body.as_deref());
    }
    if let Some(marker) = omitted_marker(omitted) {
        system.push_str(&marker);
    }
    system
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

/// `\n\n<header>\n<body>`, or nothing for no body.
fn section_chars(header: &str, body: Option<&str>) -> usize {
    body.map_or(0, |b| 3 + chars(header) + chars(b))
}

fn push_section(system: &mut String, header: &str, body: Option<&str>) {
    if let Some(body) = body {
        system.push_str("\n\n");
        system.push_str(header);
        system.push('\n');
        system.push_str(body);
    }
}

fn omitted_marker(omitted: usize) -> Option<String> {
    (omitted > 0).then(|| format!("\n\n[{omitted} older messages omitted]"))
}

fn clip_marker(cut: usize) -> String {
    format!("…[+{cut} chars]")
}

/// Cuts `text` to at most `room` chars including a `…[+N chars]` marker
/// (the marker alone if even it does not fit) and returns N.
fn clip(text: &mut Cow<str>, room: usize) -> usize {
    let total = chars(text);
    if total <= room {
        return 0;
    }
    // The marker for cutting everything is the longest one we can need.
    let keep = room.saturating_sub(chars(&clip_marker(total)));
    let cut = total - keep;
    let byte_end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    let text = text.to_mut();
    text.truncate(byte_end);
    text.push_str(&clip_marker(cut));
    cut
}
