//! `mnemo access …`: the operator's side of access control (DESIGN §6) —
//! approve pairing codes, allow and revoke user ids, set the direct-message
//! policy, opt groups in and out, and list it all. Each verb is one locked
//! read-modify-write of the channel's `access.json` — or, when the app
//! config's store is Postgres (`store.kind: postgres`, the URL from
//! `store.urlEnv` as `mnemo store …` reads it), one transaction on the
//! channel's row in the database, which every broker reads. The running
//! brokers pick the change up within a second (`access::store::RECHECK`),
//! no restart. The output is the same on both stores.
//!
//! It cannot reach the platform: an approved sender is told "paired" by the
//! broker with the answer to their next message (an `approved` notice in
//! the rules). It never edits corrupt rules: that is the operator's to fix.

use super::ids::{self, IdKind};
use super::{GlobalArgs, Setup};
use crate::access::db;
use crate::access::file::{self, AccessFile, DmPolicy, GroupMemory, GroupRule};
use crate::access::pairing;
use crate::access::store::{quarantine_notice, quarantined};
use crate::config::StoreKind;
use anyhow::{Context as _, Result};
use chrono::Utc;
use clap::{Subcommand, ValueEnum};
use mnemo_channels::printable::printable;
use mnemo_pg::PgStore;
use mnemo_sessions::Layout;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Debug, Subcommand)]
pub enum AccessCommand {
    /// Approve a pairing code: its sender joins allowFrom and is told
    /// "paired" with the answer to their next message.
    Pair { channel: String, code: String },
    /// Let a user id talk to the bot in direct messages.
    Allow {
        channel: String,
        #[arg(allow_negative_numbers = true)]
        user_id: String,
    },
    /// Take a user id off allowFrom and every group's allowFrom, and drop
    /// their pending code.
    Revoke {
        channel: String,
        #[arg(allow_negative_numbers = true)]
        user_id: String,
    },
    /// Show the channel's rules, pending codes and quarantined files.
    List {
        channel: String,
        /// The rules as one JSON document on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Set who may send direct messages.
    Policy { channel: String, policy: PolicyArg },
    /// Opt groups (chat / channel ids) in or out.
    #[command(subcommand)]
    Groups(GroupsCommand),
}

#[derive(Debug, Subcommand)]
pub enum GroupsCommand {
    /// Answer in this group (by default only when mentioned).
    Add {
        channel: String,
        /// Telegram group ids are negative: `-100…` is taken as the id.
        #[arg(allow_negative_numbers = true)]
        group_id: String,
        /// Answer every message in the group, mentioned or not.
        #[arg(long)]
        no_require_mention: bool,
        /// Give the group a memory of its own (`memory: "shared"`): its
        /// turns use it instead of each asker's personal memory.
        #[arg(long)]
        shared_memory: bool,
        /// Keep what the bot reads but is not asked as the group's context
        /// (`observe: true`; needs --shared-memory).
        #[arg(long, requires = "shared_memory")]
        observe: bool,
    },
    /// Stop answering in this group.
    Remove {
        channel: String,
        #[arg(allow_negative_numbers = true)]
        group_id: String,
    },
}

/// `dmPolicy` values on the command line.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PolicyArg {
    Pairing,
    Allowlist,
    Open,
    Disabled,
}

impl From<PolicyArg> for DmPolicy {
    fn from(p: PolicyArg) -> Self {
        match p {
            PolicyArg::Pairing => DmPolicy::Pairing,
            PolicyArg::Allowlist => DmPolicy::Allowlist,
            PolicyArg::Open => DmPolicy::Open,
            PolicyArg::Disabled => DmPolicy::Disabled,
        }
    }
}

pub async fn run(global: &GlobalArgs, command: AccessCommand) -> Result<ExitCode> {
    let setup = Setup::load(global)?;
    let root = setup.state_root.as_path();
    let channel = check(root, &command)?;
    let at = Rules::of(&setup).await?;
    let at = &at;
    // Said first, on stderr (stdout and --json stay as they were): which
    // rules this command reads or changes.
    eprintln!(
        "mnemo: access rules of `{}`: {}",
        printable(&channel),
        at.place(&channel)
    );
    if let Rules::Files { root, .. } = at
        && !root.is_dir()
    {
        eprintln!("mnemo: note: the state folder {} does not exist yet", root.display());
    }
    match command {
        AccessCommand::Pair { channel, code } => pair(at, &channel, &code).await,
        AccessCommand::Allow { channel, user_id } => allow(at, &channel, &user_id).await,
        AccessCommand::Revoke { channel, user_id } => revoke(at, &channel, &user_id).await,
        AccessCommand::List { channel, json } => list(at, &channel, json).await,
        AccessCommand::Policy { channel, policy } => set_policy(at, &channel, policy.into()).await,
        AccessCommand::Groups(GroupsCommand::Add {
            channel,
            group_id,
            no_require_mention,
            shared_memory,
            observe,
        }) => {
            let rule = GroupRule {
                require_mention: !no_require_mention,
                memory: if shared_memory {
                    GroupMemory::Shared
                } else {
                    GroupMemory::PerUser
                },
                observe,
                allow_from: None,
            };
            add_group(at, &channel, &group_id, rule).await
        }
        AccessCommand::Groups(GroupsCommand::Remove { channel, group_id }) => {
            remove_group(at, &channel, &group_id).await
        }
    }
}

/// Where the rules are: the channels' files under the state root, or the
/// database the config's store names.
enum Rules {
    Files { root: PathBuf },
    Database { store: PgStore, place: String },
}

impl Rules {
    /// The store the config names; a database is checked to be at this
    /// mnemo's schema first (it holds the rules from version 4 on).
    async fn of(setup: &Setup) -> Result<Rules> {
        if setup.config.store.kind != StoreKind::Postgres {
            return Ok(Rules::Files {
                root: setup.state_root.clone(),
            });
        }
        let store = setup.config.store.connect(&super::setup::env)?;
        mnemo_pg::migrate::check(&store)
            .await
            .context("the config keeps the access rules in the database (store.kind is `postgres`)")?;
        Ok(Rules::Database {
            store,
            place: setup.database_place(),
        })
    }

    /// Where `channel`'s rules are: its access.json, or the database.
    fn place(&self, channel: &str) -> String {
        match self {
            Rules::Files { root } => access_path(root, channel).display().to_string(),
            Rules::Database { place, .. } => place.clone(),
        }
    }

    /// One read-modify-write of `channel`'s rules: a locked update of its
    /// access.json (with a word about earlier quarantined copies: the new
    /// file starts from what is on disk, not from them), or one
    /// transaction on its row.
    async fn edit<T>(&self, channel: &str, change: impl FnOnce(&mut AccessFile) -> T) -> Result<T> {
        let context = || format!("updating the access rules of `{channel}` in {}", self.place(channel));
        match self {
            Rules::Files { root } => {
                let path = access_path(root, channel);
                if !path.exists()
                    && let Some(last) = quarantined(&path).pop()
                {
                    eprintln!(
                        "note: the last access.json of `{channel}` was corrupt and moved to {}; this starts a new one \
                         (copy entries from that file if you need them)",
                        last.display()
                    );
                }
                let (out, _) = file::update(&path, change).with_context(context)?;
                Ok(out)
            }
            Rules::Database { store, .. } => {
                let ((out, _), _) = db::edit(store, channel, change).await.with_context(context)?;
                Ok(out)
            }
        }
    }
}

/// Refuses an unknown channel or an id its platform cannot have, before
/// anything is written; the channel the command is about.
fn check(root: &Path, command: &AccessCommand) -> Result<String> {
    let (channel, id) = match command {
        AccessCommand::Pair { channel, .. }
        | AccessCommand::List { channel, .. }
        | AccessCommand::Policy { channel, .. } => (channel, None),
        AccessCommand::Allow { channel, user_id } => (channel, Some((IdKind::User, user_id))),
        // Taking away is never refused: an id allowed before these checks
        // existed must still be removable.
        AccessCommand::Revoke { channel, .. } => (channel, None),
        AccessCommand::Groups(GroupsCommand::Add { channel, group_id, .. })
        | AccessCommand::Groups(GroupsCommand::Remove { channel, group_id }) => {
            (channel, Some((IdKind::Group, group_id)))
        }
    };
    ids::check_channel(root, channel)?;
    if let Some((kind, id)) = id {
        ids::check_id(channel, kind, id)?;
    }
    Ok(channel.clone())
}

fn access_path(root: &Path, channel: &str) -> PathBuf {
    Layout::new(root, channel).access_path()
}

async fn pair(at: &Rules, channel: &str, code: &str) -> Result<ExitCode> {
    let approved = at
        .edit(channel, |rules| pairing::approve(rules, code, Utc::now()))
        .await??;
    let who = approved
        .user_name
        .map(|n| format!(" ({})", printable(&n)))
        .unwrap_or_default();
    println!(
        "paired: `{}`{who} may now talk to the bot on `{channel}`; they'll be told with the answer to their next message",
        printable(&approved.user_id)
    );
    Ok(ExitCode::SUCCESS)
}

async fn allow(at: &Rules, channel: &str, user: &str) -> Result<ExitCode> {
    let added = at
        .edit(channel, |rules| {
            rules.pending.retain(|p| p.user_id != user);
            rules.allow_from.insert(user.to_string())
        })
        .await?;
    match added {
        true => println!("allowed: `{user}` may talk to the bot on `{channel}`"),
        false => println!("`{user}` was already allowed on `{channel}`"),
    }
    Ok(ExitCode::SUCCESS)
}

async fn revoke(at: &Rules, channel: &str, user: &str) -> Result<ExitCode> {
    let (was_allowed, was_pending, open_groups, policy) = at
        .edit(channel, |rules| {
            let mut found = rules.allow_from.remove(user);
            for rule in rules.groups.values_mut() {
                found |= rule.allow_from.as_mut().is_some_and(|list| list.remove(user));
            }
            let before = rules.pending.len() + rules.approved.len();
            rules.pending.retain(|p| p.user_id != user);
            rules.approved.retain(|n| n.user_id != user);
            let pending = rules.pending.len() + rules.approved.len() < before;
            let open_groups = rules.groups.values().filter(|g| g.allow_from.is_none()).count();
            (found, pending, open_groups, rules.dm_policy)
        })
        .await?;
    match (was_allowed, was_pending) {
        (true, _) => println!("revoked: `{user}` is no longer allowed on `{channel}`"),
        (false, true) => {
            println!("`{user}` was not on any allowFrom list of `{channel}`; their pairing code is dropped")
        }
        (false, false) => println!("`{user}` was not on any allowFrom list of `{channel}`"),
    }
    if policy == DmPolicy::Open {
        println!("note: dmPolicy is `open`, so `{user}` can still send direct messages");
    }
    if open_groups > 0 {
        println!("note: {open_groups} group(s) have no allowFrom of their own; `{user}` can still talk there");
    }
    if !was_allowed && !was_pending {
        // An unknown user is not a revocation done: most likely the wrong
        // channel or state folder.
        eprintln!(
            "error: user `{user}` is not in the access rules of `{channel}` (looked in {}): nothing revoked",
            at.place(channel)
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

async fn set_policy(at: &Rules, channel: &str, policy: DmPolicy) -> Result<ExitCode> {
    at.edit(channel, |rules| rules.dm_policy = policy).await?;
    println!("dmPolicy of `{channel}` is now `{}`", policy.name());
    Ok(ExitCode::SUCCESS)
}

/// Opts `group` in with `rule`'s mention, memory and observing (a group's
/// `allowFrom` already set is kept).
async fn add_group(at: &Rules, channel: &str, group: &str, rule: GroupRule) -> Result<ExitCode> {
    let said = group_line(&rule);
    at.edit(channel, |rules| {
        let kept = rules.groups.entry(group.to_string()).or_insert_with(GroupRule::default);
        *kept = GroupRule {
            allow_from: kept.allow_from.take(),
            ..rule
        };
    })
    .await?;
    println!("group `{group}` on `{channel}`: the bot answers {said}");
    Ok(ExitCode::SUCCESS)
}

/// When the bot answers in a group, and from whose memory.
fn group_line(rule: &GroupRule) -> String {
    let when = if rule.require_mention {
        "when mentioned"
    } else {
        "to every message"
    };
    match (rule.memory, rule.observe) {
        (GroupMemory::PerUser, _) => format!("{when}, from each asker's own memory"),
        (GroupMemory::Shared, false) => format!("{when}, from the group's own memory"),
        (GroupMemory::Shared, true) => {
            format!("{when}, from the group's own memory, keeping what it reads unasked")
        }
    }
}

async fn remove_group(at: &Rules, channel: &str, group: &str) -> Result<ExitCode> {
    match at.edit(channel, |rules| rules.groups.remove(group).is_some()).await? {
        true => println!("group `{group}` removed from `{channel}`: the bot ignores it"),
        false => {
            println!("group `{group}` was not opted in on `{channel}`");
            eprintln!(
                "error: group `{group}` is not in the access rules of `{channel}` (looked in {}): nothing removed",
                at.place(channel)
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(at: &Rules, channel: &str, json: bool) -> Result<ExitCode> {
    let (rules, doc) = match at {
        Rules::Files { root } => {
            let path = access_path(root, channel);
            let Some(rules) = list_file(&path, json) else {
                return Ok(ExitCode::FAILURE);
            };
            match rules {
                Ok(rules) => (
                    rules,
                    serde_json::json!({ "channel": channel, "file": path, "stateDir": root }),
                ),
                Err(notice) => {
                    println!("restrictive: {notice}");
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
        Rules::Database { store, place } => {
            let row = mnemo_pg::access::read(store, channel)
                .await
                .with_context(|| format!("reading the access rules of `{channel}`"))?;
            let Some(row) = row else {
                if !json {
                    println!("the database holds no access rules for `{channel}`: defaults apply");
                }
                let doc =
                    serde_json::json!({ "channel": channel, "store": "postgres", "database": place, "revision": null });
                return Ok(print_rules(channel, &AccessFile::default(), doc, json));
            };
            match db::parse(channel, &row.doc) {
                Ok(rules) => (
                    rules,
                    serde_json::json!({ "channel": channel, "store": "postgres", "database": place, "revision": row.revision }),
                ),
                Err(e) => {
                    eprintln!("error: {e}");
                    eprintln!("the running brokers refuse strangers until this is fixed");
                    return Ok(ExitCode::FAILURE);
                }
            }
        }
    };
    Ok(print_rules(channel, &rules, doc, json))
}

/// The file's rules, or the quarantine notice; `None` (after saying why)
/// when the file is corrupt.
fn list_file(path: &Path, json: bool) -> Option<Result<AccessFile, String>> {
    for q in quarantined(path) {
        eprintln!("warning: a corrupt access.json was moved aside to {}", q.display());
    }
    if let Some(notice) = quarantine_notice(path) {
        return Some(Err(notice));
    }
    match file::read(path) {
        Ok(Some(rules)) => Some(Ok(rules)),
        Ok(None) => {
            if !json {
                println!("{} does not exist: defaults apply", path.display());
            }
            Some(Ok(AccessFile::default()))
        }
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("the running broker refuses strangers until this is fixed");
            None
        }
    }
}

/// `--json`: `doc` (where the rules are) with the rules added; otherwise
/// the listing.
fn print_rules(channel: &str, rules: &AccessFile, mut doc: serde_json::Value, json: bool) -> ExitCode {
    if json {
        doc["rules"] = serde_json::json!(rules);
        println!("{doc}");
    } else {
        print!("{}", describe(channel, rules, Utc::now()));
    }
    ExitCode::SUCCESS
}

/// The rules as the operator reads them.
fn describe(channel: &str, rules: &AccessFile, now: chrono::DateTime<Utc>) -> String {
    let mut out = format!("channel `{channel}`\ndmPolicy: {}\n", rules.dm_policy.name());
    let list = |ids: &mut dyn Iterator<Item = &String>| ids.map(String::as_str).collect::<Vec<_>>().join(", ");
    out += &format!(
        "allowFrom ({}): {}\n",
        rules.allow_from.len(),
        list(&mut rules.allow_from.iter())
    );
    if rules.groups.is_empty() {
        out += "groups: none (the bot ignores every group)\n";
    }
    for (id, g) in &rules.groups {
        let mention = if g.require_mention {
            "when mentioned"
        } else {
            "every message"
        };
        let who = g
            .allow_from
            .as_ref()
            .map_or_else(|| "everyone".to_string(), |l| list(&mut l.iter()));
        let memory = match (g.memory, g.observe) {
            (GroupMemory::PerUser, _) => "",
            (GroupMemory::Shared, false) => "; memory: shared",
            (GroupMemory::Shared, true) => "; memory: shared, observing",
        };
        out += &format!("group {id}: {mention}; who: {who}{memory}\n");
    }
    for p in &rules.pending {
        let name = p
            .user_name
            .as_deref()
            .map(|n| format!(" ({})", printable(n)))
            .unwrap_or_default();
        let left = (p.expires_at - now).num_minutes();
        let state = if left >= 0 {
            format!("expires in {left} min")
        } else {
            "expired".to_string()
        };
        out += &format!("pending {}: user `{}`{name}, {state}\n", p.code, printable(&p.user_id));
    }
    for n in &rules.approved {
        out += &format!("approved, not told yet: `{}`\n", printable(&n.user_id));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::file::PendingPairing;
    use chrono::TimeDelta;

    #[test]
    fn the_listing_names_policy_people_groups_and_codes() {
        let now = Utc::now();
        let mut rules = AccessFile::default();
        rules.allow_from.extend(["U1".to_string(), "U2".to_string()]);
        rules.groups.insert("C9".into(), GroupRule::default());
        rules.pending.push(PendingPairing {
            code: "ABCD2345".into(),
            user_id: "U3".into(),
            user_name: Some("Ada".into()),
            chat_id: "D3".into(),
            created_at: now,
            expires_at: now + TimeDelta::minutes(30) + TimeDelta::seconds(5),
            replies: 1,
        });
        let text = describe("telegram", &rules, now);
        assert!(text.contains("dmPolicy: pairing"), "{text}");
        assert!(text.contains("allowFrom (2): U1, U2"), "{text}");
        assert!(text.contains("group C9: when mentioned; who: everyone"), "{text}");
        assert!(
            text.contains("pending ABCD2345: user `U3` (Ada), expires in 30 min"),
            "{text}"
        );
    }
}
