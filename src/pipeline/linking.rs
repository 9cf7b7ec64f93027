//! `/session link [CODE]` and `/session unlink <platform>` in a turn
//! (the rules are `crate::people`'s), and whose memory a message uses:
//! its account's, or the home's it is linked to.
//!
//! What it must not do: link from a group, or take the memory of the
//! person it answers (on Postgres that is their turn lock, and linking
//! looks at both accounts' memory itself).

use super::{Pipeline, TurnError};
use crate::channel_memory::ChannelMemory;
use crate::ops::turn_log::{Outcome, TurnTrace};
use crate::people::{Linked, account_of, replies};
use chrono::Utc;
use mnemo_channels::{ChatKind, Inbound, Outbound};
use mnemo_sessions::SafeName;
use mnemo_sessions::commands::SessionCommand;
use mnemo_sessions::store::StoreError;

/// Said when a linked account's memory is on a platform this bot does
/// not serve now.
pub const HOME_NOT_SERVED: &str = "Your memory is linked to your account on another platform, which this bot \
does not serve right now, so I did not keep or answer this. Please try again later.";

impl Pipeline {
    /// The channel and user whose memory `message`'s sender uses: their
    /// own, or the home's their account is linked to.
    pub(super) async fn whose_memory(&self, message: &Inbound) -> Result<(String, SafeName), StoreError> {
        let home = self
            .people
            .memory_of(&account_of(&message.channel, &message.user_id))
            .await?;
        Ok((home.channel, home.user))
    }

    /// Where `message`'s memory is: its home channel, its user there and
    /// that channel's memory (`user` as admitted: a shared group's stays).
    /// `None` when it cannot be kept: the links could not be read (the
    /// platform may deliver it again) or the home is not served here.
    pub(super) async fn home_of(
        &self,
        message: &Inbound,
        user: SafeName,
    ) -> Option<(String, SafeName, &ChannelMemory)> {
        let (home, user) = match user.is_group() {
            true => (message.channel.clone(), user),
            false => match self.whose_memory(message).await {
                Ok(found) => found,
                Err(e) => {
                    tracing::error!(channel = %message.channel, msg_id = %message.msg_id, error = %e, "linked accounts could not be read; message not taken");
                    TurnTrace::start(message).finish(Outcome::Failed);
                    if !self.settle(&message.channel, &message.msg_id, false) {
                        self.reply(message, super::NOT_STORED).await;
                    }
                    return None;
                }
            },
        };
        let Some(memory) = self.memories.get(&home) else {
            self.reply(message, HOME_NOT_SERVED).await;
            TurnTrace::start(message).finish(Outcome::Refused);
            self.settle(&message.channel, &message.msg_id, true);
            return None;
        };
        Some((home, user, memory))
    }

    /// Answers a `/session link` or `/session unlink`, privately.
    pub(super) async fn linking(&self, message: &Inbound, command: &SessionCommand) -> Result<Outcome, TurnError> {
        let account = account_of(&message.channel, &message.user_id);
        let now = Utc::now();
        let text = match command {
            _ if message.chat_kind == ChatKind::Group => replies::NOT_IN_A_GROUP.to_string(),
            SessionCommand::Link { code: None } => {
                let listing = self.people.listing(&account).await?;
                match self.people.issue(&account, now).await? {
                    Ok(code) => format!(
                        "Your link code: {code}\nWithin 10 minutes, send `/session link {code}` to me from your \
account on the other platform, and both accounts share one memory. It works once.\n\n{listing}"
                    ),
                    Err(refusal) => format!("{refusal}\n\n{listing}"),
                }
            }
            SessionCommand::Link { code: Some(code) } => {
                match self.people.redeem(&account, code, &self.memories, now).await {
                    Ok(Linked::Done { home, merged }) => {
                        tracing::info!(channel = %message.channel, home = %home.channel, merged, "accounts linked");
                        let how = if merged { MERGED } else { "" };
                        format!(
                            "Linked: your accounts now share one memory, kept with your {} account.{how} \
`/session link` lists them; `/session unlink <platform>` splits them again.",
                            home.channel
                        )
                    }
                    Ok(Linked::Refused(reply)) => reply.to_string(),
                    Err(StoreError::Invalid(reason)) => format!("I could not link: {reason}."),
                    Err(e) => return Err(e.into()),
                }
            }
            SessionCommand::Unlink { platform } => self.people.unlink(&account, platform).await?,
            _ => return Ok(Outcome::Command),
        };
        self.send(Outbound::reply(message, text)).await;
        Ok(Outcome::Command)
    }
}

/// What a link that merged two memories adds to its reply.
pub const MERGED: &str = " Both accounts had a memory: they are merged into one, \
messages by time, nothing left out; `/session undo` takes back what the merge did to your profile, \
and each further undo one note.";
