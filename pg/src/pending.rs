//! Questions stored and never answered, on the Postgres store: which users
//! have some and what they are (the rule is `mnemo_sessions::pending`), for
//! the broker's recovery at start and its sweep for what a dead broker
//! left. Reads only; the turn that answers one checks again under the
//! user's lock ([`crate::turn::PgTurn::is_settled`]).

use crate::PgError;
use crate::channel::PgChannel;
use crate::turn::record_at;
use chrono::{DateTime, Utc};
use mnemo_sessions::store::Look;
use mnemo_sessions::{Record, SafeName};

/// The questions stored between `$3` and `$2` (message time) that no
/// record answers (a group's observed messages, `seen-…`, are none), oldest first per user. Folded or not: another broker's
/// fold may have archived a question its broker never answered. A scan of
/// the channel's messages (no index on `ts`): for a start only.
const PENDING: &str = "
SELECT q.user_key, q.ts, q.role, q.text, q.msg_id, q.thread_id, q.chat_id, q.user_name FROM mnemo_messages q
WHERE q.channel = $1 AND q.role = 'user' AND q.msg_id NOT LIKE 'seen-%' AND q.ts < $2 AND q.ts > $3
  AND NOT EXISTS (SELECT 1 FROM mnemo_messages r
                  WHERE r.channel = q.channel AND r.user_key = q.user_key AND r.msg_id = 're-' || q.msg_id)
ORDER BY q.user_key, q.seq";

/// [`PENDING`] among the unfolded messages only, which the partial index
/// `mnemo_messages_unfolded` holds (users × `stm.maxMessages` at most):
/// cheap enough for the sweep every minute. A folded question a dead
/// broker left is found by the next start's [`PENDING`].
const PENDING_UNFOLDED: &str = "
SELECT q.user_key, q.ts, q.role, q.text, q.msg_id, q.thread_id, q.chat_id, q.user_name FROM mnemo_messages q
WHERE q.channel = $1 AND q.fold IS NULL AND q.role = 'user' AND q.msg_id NOT LIKE 'seen-%' AND q.ts < $2 AND q.ts > $3
  AND NOT EXISTS (SELECT 1 FROM mnemo_messages r
                  WHERE r.channel = q.channel AND r.user_key = q.user_key AND r.msg_id = 're-' || q.msg_id)
ORDER BY q.user_key, q.seq";

impl PgChannel {
    /// Every user of the channel with questions not settled, and those
    /// questions, oldest first: the ones stored after `since` and before
    /// `stored_before` (message times), where `look` says.
    pub async fn pending(
        &self,
        stored_before: DateTime<Utc>,
        since: DateTime<Utc>,
        look: Look,
    ) -> Result<Vec<(SafeName, Vec<Record>)>, PgError> {
        let conn = self.store().conn().await?;
        let statement = conn
            .prepare_cached(match look {
                Look::Everywhere => PENDING,
                Look::Unfolded => PENDING_UNFOLDED,
            })
            .await?;
        let channel = self.name();
        let mut found: Vec<(SafeName, Vec<Record>)> = Vec::new();
        for row in conn.query(&statement, &[&channel, &stored_before, &since]).await? {
            let key: String = row.get(0);
            let Some(user) = SafeName::from_encoded(&key) else {
                continue;
            };
            let question = record_at(&row, channel, 1);
            match found.last_mut() {
                Some((last, questions)) if *last == user => questions.push(question),
                _ => found.push((user, vec![question])),
            }
        }
        Ok(found)
    }
}
