//! Linked identities, the broker's rules (DESIGN §5, issue 37): one person
//! whose accounts on several platforms share one memory. `/session link`
//! in a private chat on platform A answers with a one-time code (about
//! 49.5 bits, valid for 10 minutes, kept by its hash); `/session link
//! CODE` sent from the same person's account on platform B links B to A's
//! memory (its *home*). A code works once, only from another platform's
//! account, never in a group, and 5 wrong codes in an hour lock the
//! sender out of linking for the rest of that hour; a wrong code never says
//! whether any account exists. Each platform's access rules still apply
//! there (a message is admitted before its account is looked up).
//!
//! Whose memory is kept: the home is the issuer's, unless only the
//! newcomer has memory (then the newcomer's, when the issuer is alone).
//! When both have memory, the newcomer's is merged into the home's through
//! the seam ([`mnemo_sessions::whole::merge`]: by time, nothing left out,
//! undoable from versions) and then deleted ([`People::merge_and_link`]
//! says in which order). `/session unlink <platform>` takes that
//! platform's account out: the home keeps the shared memory, including
//! what was said from the other platform while linked, and the account
//! that left starts with a memory of its own.
//!
//! Where links are kept: the state folder's `people/links.json`, or the
//! database (`mnemo_sessions::people`). What it must not do: link from a
//! group, reveal a code or another account in a log, or move memory
//! between two people (a code only links accounts of the one who holds
//! both).

use crate::channel_memory::ChannelMemory;
use chrono::{DateTime, Utc};
use mnemo_sessions::SafeName;
use mnemo_sessions::people::{self, Account, CODE_TTL, KEEP_FAILURES, LinkStore};
use mnemo_sessions::store::StoreError;
use mnemo_sessions::whole::Whole;
use mnemo_sessions::whole::merge::Sides;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The replies of linking (shown to the person, in their private chat).
pub mod replies {
    pub const NOT_IN_A_GROUP: &str = "Linking accounts works only in a private chat with me, never in a group.";
    pub const WRONG_CODE: &str = "That code did not work: it may be mistyped, used already, or older than 10 minutes. Ask for a new one with /session link on your other account.";
    pub const NOT_A_CODE: &str =
        "A link code has 10 letters and digits, like K7QM4XWPAB. Send /session link on your other account to get one.";
    pub const LOCKED: &str = "Too many wrong codes: linking is paused for this account for an hour.";
    pub const SAME_ACCOUNT: &str =
        "Send this code from your account on the other platform, not from the one that asked for it.";
    pub const SAME_PLATFORM: &str = "Both accounts are on the same platform; link accounts on different platforms.";
    pub const ALREADY_LINKED: &str =
        "This account is linked already. Send /session unlink <platform> first if you want to link it elsewhere.";
}

/// Links and their rules, over the store's [`LinkStore`].
#[derive(Clone)]
pub struct People {
    links: Arc<dyn LinkStore>,
    /// Every link, as read at most [`FRESH`] ago (each message asks whose
    /// memory it is; on Postgres that would be a round trip each): this
    /// broker's own changes clear it, another broker's show within
    /// [`FRESH`].
    seen: Arc<std::sync::Mutex<Option<Seen>>>,
}

/// The links as read at an instant: each linked account's home, and the
/// homes.
type Seen = (std::time::Instant, HashMap<Account, Account>, HashSet<Account>);

/// How long the links read for messages are used before they are read again.
const FRESH: std::time::Duration = std::time::Duration::from_secs(1);

/// What `/session link CODE` did.
#[derive(Debug, PartialEq, Eq)]
pub enum Linked {
    /// Linked: `home` is the account whose memory both use now; `merged`
    /// when the newcomer's memory joined it.
    Done { home: Account, merged: bool },
    /// Refused, with the reply.
    Refused(&'static str),
}

impl People {
    pub fn new(links: Arc<dyn LinkStore>) -> People {
        People {
            links,
            seen: Arc::default(),
        }
    }

    /// The links of `state_root` (files) or of `database`.
    pub fn open(state_root: &std::path::Path, database: Option<&mnemo_pg::PgStore>) -> People {
        match database {
            Some(database) => People::new(Arc::new(mnemo_pg::people::PgLinks::new(database.clone()))),
            None => People::new(Arc::new(people::files::FileLinks::new(state_root))),
        }
    }

    /// The account whose memory `account` uses: its home, or itself.
    pub async fn memory_of(&self, account: &Account) -> Result<Account, StoreError> {
        let cached = {
            let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            seen.as_ref()
                .filter(|(at, _, _)| at.elapsed() < FRESH)
                .map(|(_, homes, _)| homes.get(account).cloned())
        };
        let home = match cached {
            Some(home) => home,
            None => {
                let homes: HashMap<Account, Account> = self
                    .links
                    .all()
                    .await?
                    .into_iter()
                    .map(|l| (l.account, l.home))
                    .collect();
                let home = homes.get(account).cloned();
                let shared = homes.values().cloned().collect();
                *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = Some((std::time::Instant::now(), homes, shared));
                home
            }
        };
        Ok(home.unwrap_or_else(|| account.clone()))
    }

    /// Whether other accounts use `home`'s memory, as last read for
    /// messages (their turns then take turns with its own).
    pub fn is_home(&self, home: &Account) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.as_ref().is_some_and(|(_, _, shared)| shared.contains(home))
    }

    /// [`People::memory_of`] as the store says now (the rules of linking
    /// never act on what was read a second ago).
    async fn home_now(&self, account: &Account) -> Result<Account, StoreError> {
        Ok(self.links.home_of(account).await?.unwrap_or_else(|| account.clone()))
    }

    /// Forgets the links read for messages (after this broker changed one).
    fn changed(&self) {
        *self.seen.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// A new code for `account` (replacing its earlier one), or why not.
    pub async fn issue(
        &self,
        account: &Account,
        now: DateTime<Utc>,
    ) -> Result<Result<String, &'static str>, StoreError> {
        if self.locked(account, now).await? {
            return Ok(Err(replies::LOCKED));
        }
        let code = people::new_code();
        self.links
            .put_code(&people::code_hash(&code), account, now, now + CODE_TTL)
            .await?;
        Ok(Ok(code))
    }

    /// `/session link CODE` from `account`: links it to the code's issuer
    /// (see the module doc for whose memory is kept). `memories` are the
    /// served channels' (to see who has memory).
    pub async fn redeem(
        &self,
        account: &Account,
        code: &str,
        memories: &HashMap<String, ChannelMemory>,
        now: DateTime<Utc>,
    ) -> Result<Linked, StoreError> {
        if self.locked(account, now).await? {
            return Ok(Linked::Refused(replies::LOCKED));
        }
        if !people::looks_like_code(code) {
            return Ok(Linked::Refused(replies::NOT_A_CODE));
        }
        let Some(issuer) = self.links.take_code(&people::code_hash(code), now).await? else {
            self.links.failed(account, now).await?;
            return Ok(Linked::Refused(if self.locked(account, now).await? {
                replies::LOCKED
            } else {
                replies::WRONG_CODE
            }));
        };
        if issuer == *account {
            return Ok(Linked::Refused(replies::SAME_ACCOUNT));
        }
        let home = self.home_now(&issuer).await?;
        let linked = self.accounts_of(&home).await?;
        if linked.iter().any(|a| a.channel == account.channel) {
            return Ok(Linked::Refused(replies::SAME_PLATFORM));
        }
        if self.links.home_of(account).await?.is_some() || !self.links.linked_to(account).await?.is_empty() {
            return Ok(Linked::Refused(replies::ALREADY_LINKED));
        }
        let home_held = holds_memory(memories, &home).await?;
        let mine_held = holds_memory(memories, account).await?;
        if mine_held && !home_held && linked.len() == 1 {
            // Only the newcomer has memory: it becomes the home (nothing
            // to move); not when others share the issuer's memory.
            self.links.link(&issuer, account, now).await?;
            self.changed();
            return Ok(Linked::Done {
                home: account.clone(),
                merged: false,
            });
        }
        if mine_held {
            self.merge_and_link(memories, &home, account, now).await?;
        } else {
            self.links.link(account, &home, now).await?;
            self.changed();
        }
        Ok(Linked::Done {
            home,
            merged: mine_held,
        })
    }

    /// Links `other` to `home` with its memory merged into the home's
    /// ([`mnemo_sessions::whole::merge`]), then deletes its own. Both are
    /// held meanwhile (on Postgres, both users' turn locks). In this order,
    /// so that nothing is lost: merged first (a failure links nothing; a
    /// crash leaves both memories, and linking again merges nothing twice);
    /// linked; then, once every broker routes the account to the home (the
    /// links are read again within [`FRESH`]), what was stored for it in
    /// between is merged too, and its memory deleted. A failure there
    /// undoes the link.
    async fn merge_and_link(
        &self,
        memories: &HashMap<String, ChannelMemory>,
        home: &Account,
        other: &Account,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let (Some(home_memory), Some(other_memory)) = (memories.get(&home.channel), memories.get(&other.channel))
        else {
            return Err(StoreError::Invalid("that platform is not served by this bot"));
        };
        let sides = Sides {
            home: &home.user,
            other: &other.user,
            from: &other.channel,
        };
        let mut theirs = other_memory.store.user(&other.user).await?;
        let mut mine = home_memory.store.user(&home.user).await?;
        let moved = theirs.whole().await?;
        mine.merge_in(&moved, sides, now).await?;
        self.links.link(other, home, now).await?;
        self.changed();
        tokio::time::sleep(FRESH + FRESH / 2).await;
        let finished = async {
            let again = theirs.whole().await?;
            if again.messages != moved.messages {
                let late = Whole {
                    messages: again.messages,
                    folds: again.folds,
                    ..Whole::default()
                };
                mine.merge_in(&late, sides, now).await?;
            }
            theirs.clear_all().await
        };
        if let Err(e) = finished.await {
            self.links.unlink(other).await?;
            self.changed();
            return Err(e);
        }
        Ok(())
    }

    /// Whether `account` sent too many wrong codes to link now.
    async fn locked(&self, account: &Account, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let failures = self.links.failures(account, now - KEEP_FAILURES).await?;
        Ok(people::locked_until(&failures, now).is_some())
    }

    /// Every account of the person whose memory is `home`'s: the home
    /// first, then the linked ones, oldest first.
    pub async fn accounts_of(&self, home: &Account) -> Result<Vec<Account>, StoreError> {
        let mut accounts = vec![home.clone()];
        accounts.extend(self.links.linked_to(home).await?.into_iter().map(|l| l.account));
        Ok(accounts)
    }

    /// `/session unlink <platform>` from `account`: that platform's
    /// account of the person leaves; the reply.
    pub async fn unlink(&self, account: &Account, platform: &str) -> Result<String, StoreError> {
        let home = self.home_now(account).await?;
        let accounts = self.accounts_of(&home).await?;
        if accounts.len() < 2 {
            return Ok("This account is not linked to any other.".to_string());
        }
        let Some(leaving) = accounts.iter().find(|a| a.channel == platform) else {
            let platforms: Vec<&str> = accounts.iter().map(|a| a.channel.as_str()).collect();
            return Ok(format!(
                "None of your linked accounts is on `{}`; they are on {}.",
                one_word(platform),
                platforms.join(", ")
            ));
        };
        if *leaving == home {
            // The home keeps the memory; every other account leaves it.
            for other in &accounts[1..] {
                self.links.unlink(other).await?;
            }
        } else {
            self.links.unlink(leaving).await?;
        }
        self.changed();
        Ok(format!(
            "Unlinked. Everything said while linked stays with the memory of your {} account; your {} account now has a memory of its own, starting empty.",
            home.channel,
            if *leaving == home {
                accounts[1].channel.as_str()
            } else {
                leaving.channel.as_str()
            }
        ))
    }

    /// Takes every account of the person whose memory is `home` apart
    /// (their memory is being deleted: the links go with it).
    pub async fn forget(&self, home: &Account) -> Result<usize, StoreError> {
        let mut n = 0;
        for link in self.links.linked_to(home).await? {
            n += usize::from(self.links.unlink(&link.account).await?);
        }
        self.changed();
        Ok(n)
    }

    /// The list `/session link` shows after the code.
    pub async fn listing(&self, account: &Account) -> Result<String, StoreError> {
        let home = self.home_now(account).await?;
        let accounts = self.accounts_of(&home).await?;
        if accounts.len() < 2 {
            return Ok("No other account is linked to this one yet.".to_string());
        }
        let list: Vec<String> = accounts
            .iter()
            .map(|a| {
                let me = if a == account { " (this one)" } else { "" };
                let memory = if *a == home { ", keeps the memory" } else { "" };
                format!("• {}{me}{memory}", a.channel)
            })
            .collect();
        Ok(format!("Linked accounts sharing one memory:\n{}", list.join("\n")))
    }

    /// Every link, for reports.
    pub async fn all(&self) -> Result<Vec<people::Link>, StoreError> {
        self.links.all().await
    }
}

/// Whether `account` has anything in memory (its channel must be served).
async fn holds_memory(memories: &HashMap<String, ChannelMemory>, account: &Account) -> Result<bool, StoreError> {
    let Some(memory) = memories.get(&account.channel) else {
        return Err(StoreError::Invalid("that platform is not served by this bot"));
    };
    let mut mine = memory.store.user(&account.user).await?;
    Ok(mine.held().await?.count > 0)
}

/// `text` as one printable word (a platform name typed by the user).
fn one_word(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(32)
        .collect()
}

/// The account a message came from.
pub fn account_of(channel: &str, user_id: &str) -> Account {
    Account::new(channel, SafeName::of(user_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    fn people() -> (tempfile::TempDir, People) {
        let state = tempfile::tempdir().unwrap();
        let people = People::open(state.path(), None);
        (state, people)
    }

    #[tokio::test]
    async fn a_code_older_than_ten_minutes_is_refused_like_a_wrong_one() {
        let (_state, people) = people();
        let (ada, slack) = (account_of("telegram", "42"), account_of("slack", "U1"));
        let now = Utc::now();
        let code = people.issue(&ada, now).await.unwrap().unwrap();
        let late = now + CODE_TTL + TimeDelta::seconds(1);
        let said = people.redeem(&slack, &code, &HashMap::new(), late).await.unwrap();
        assert_eq!(said, Linked::Refused(replies::WRONG_CODE));
        // Taken by that try: gone even for a time it would have been good.
        let said = people.redeem(&slack, &code, &HashMap::new(), now).await.unwrap();
        assert_eq!(said, Linked::Refused(replies::WRONG_CODE));
    }

    #[tokio::test]
    async fn five_wrong_codes_lock_linking_for_an_hour_even_for_a_right_code() {
        let (_state, people) = people();
        let (ada, slack) = (account_of("telegram", "42"), account_of("slack", "U1"));
        let t0 = Utc::now();
        for i in 0..4 {
            let at = t0 + TimeDelta::minutes(i * 10);
            let said = people.redeem(&slack, "ABCDEFGHJK", &HashMap::new(), at).await.unwrap();
            assert_eq!(said, Linked::Refused(replies::WRONG_CODE));
        }
        let fifth = t0 + TimeDelta::minutes(50);
        let said = people
            .redeem(&slack, "ABCDEFGHJK", &HashMap::new(), fifth)
            .await
            .unwrap();
        assert_eq!(said, Linked::Refused(replies::LOCKED));
        let almost = fifth + TimeDelta::minutes(59);
        let code = people.issue(&ada, almost).await.unwrap().unwrap();
        let said = people.redeem(&slack, &code, &HashMap::new(), almost).await.unwrap();
        assert_eq!(said, Linked::Refused(replies::LOCKED), "locked an hour from the fifth");
        assert_eq!(people.issue(&slack, almost).await.unwrap(), Err(replies::LOCKED));
        // An hour after the fifth, the right code is taken (here the
        // platform is not served, which is the next thing checked).
        let after = fifth + TimeDelta::minutes(61);
        let code = people.issue(&ada, after).await.unwrap().unwrap();
        let refused = people.redeem(&slack, &code, &HashMap::new(), after).await;
        assert!(matches!(refused, Err(StoreError::Invalid(_))), "{refused:?}");
    }
}
