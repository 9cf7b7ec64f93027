//! Abuse limits per user, from the app config's `limits` (DESIGN §8): a
//! token bucket (`userMessagesPerMinute` refill, `userBurst` size) and the
//! longest message taken (`maxMessageChars`: longer input is refused, not
//! truncated — a cut message would be answered as if it were whole).
//!
//! A hit is answered once: the first refused message in a minute gets a
//! short reply, the rest of that minute's refusals are silent, so a flood
//! cannot turn the bot into an amplifier. Model calls in flight per user
//! need no counter here: the dispatcher runs one turn at a time per
//! (channel, user), and a turn makes one call, so the cap is 1 by
//! construction (tests/access.rs checks it).
//!
//! Time comes in as an explicit `Instant`; nothing here sleeps or logs.

use crate::config::LimitsConfig;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one notice covers: later hits of the same kind stay silent.
pub const NOTICE_WINDOW: Duration = Duration::from_secs(60);
/// Users tracked before idle ones (full bucket, no recent notice) are dropped.
const MAX_TRACKED: usize = 10_000;

/// Which limit a message hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hit {
    /// The user's bucket is empty; a token is back after `retry_after`.
    TooFast { retry_after: Duration },
    /// Longer than `maxMessageChars`.
    TooLong { chars: usize, limit: usize },
}

impl Hit {
    /// The short reply for the first hit in a window.
    pub fn reply(&self) -> String {
        match self {
            Hit::TooFast { retry_after } => format!(
                "You're sending messages faster than I can take them, so I'm skipping them for now \
                 (they are not saved). Try again in about {} seconds.",
                retry_after.as_secs().max(1)
            ),
            Hit::TooLong { chars, limit } => format!(
                "That message is too long ({chars} characters; the limit is {limit}). Please shorten it or split it up."
            ),
        }
    }

    /// For the logs (no text, just the limit).
    /// A short code for the `reason` metric label.
    pub fn label(&self) -> &'static str {
        match self {
            Hit::TooFast { .. } => "rate_limit",
            Hit::TooLong { .. } => "too_long",
        }
    }

    pub fn reason(&self) -> &'static str {
        match self {
            Hit::TooFast { .. } => "rate limit (userMessagesPerMinute)",
            Hit::TooLong { .. } => "message too long (maxMessageChars)",
        }
    }
}

/// A refused message: which limit, and whether this is the one to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub hit: Hit,
    pub tell: bool,
}

/// Notice kinds, each answered at most once per window.
#[derive(Clone, Copy)]
enum Notice {
    TooFast = 0,
    TooLong = 1,
    QueueFull = 2,
}

struct UserState {
    tokens: f64,
    at: Instant,
    told: [Option<Instant>; 3],
}

pub struct Limiter {
    per_minute: u32,
    burst: u32,
    max_chars: usize,
    /// Keyed by (channel, user id). A std mutex: a few arithmetic steps, no
    /// `.await` inside.
    users: Mutex<HashMap<(String, String), UserState>>,
}

impl Limiter {
    pub fn new(limits: &LimitsConfig) -> Self {
        Limiter {
            per_minute: limits.user_messages_per_minute,
            burst: limits.burst().max(1),
            max_chars: limits.max_message_chars,
            users: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one message of `chars` characters from `user` at `now`. Every
    /// message costs a token, an oversized one too. `rate_limited: false`
    /// skips the bucket (the console's local owner).
    pub fn check(
        &self,
        channel: &str,
        user: &str,
        chars: usize,
        rate_limited: bool,
        now: Instant,
    ) -> Result<(), Refusal> {
        let mut users = self.lock();
        let state = self.state(&mut users, channel, user, now);
        if rate_limited && self.per_minute > 0 {
            self.refill(state, now);
            if state.tokens < 1.0 {
                let per_token = 60.0 / f64::from(self.per_minute);
                let retry_after = Duration::from_secs_f64(((1.0 - state.tokens) * per_token).max(0.0));
                let tell = first_in_window(state, Notice::TooFast, now);
                return Err(Refusal {
                    hit: Hit::TooFast { retry_after },
                    tell,
                });
            }
            state.tokens -= 1.0;
        }
        if chars > self.max_chars {
            let tell = first_in_window(state, Notice::TooLong, now);
            return Err(Refusal {
                hit: Hit::TooLong {
                    chars,
                    limit: self.max_chars,
                },
                tell,
            });
        }
        Ok(())
    }

    /// Whether to tell `user` their queue is full: once per window.
    pub fn tell_queue_full(&self, channel: &str, user: &str, now: Instant) -> bool {
        let mut users = self.lock();
        let state = self.state(&mut users, channel, user, now);
        first_in_window(state, Notice::QueueFull, now)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), UserState>> {
        // Each update is a few field writes: consistent even after a panic.
        self.users.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn state<'m>(
        &self,
        users: &'m mut HashMap<(String, String), UserState>,
        channel: &str,
        user: &str,
        now: Instant,
    ) -> &'m mut UserState {
        if users.len() >= MAX_TRACKED {
            users.retain(|_, s| {
                self.refill(s, now);
                s.tokens < f64::from(self.burst)
                    || s.told.iter().flatten().any(|t| now.duration_since(*t) < NOTICE_WINDOW)
            });
        }
        let burst = f64::from(self.burst);
        users
            .entry((channel.to_string(), user.to_string()))
            .or_insert(UserState {
                tokens: burst,
                at: now,
                told: [None; 3],
            })
    }

    fn refill(&self, state: &mut UserState, now: Instant) {
        let elapsed = now.saturating_duration_since(state.at).as_secs_f64();
        let gained = elapsed * f64::from(self.per_minute) / 60.0;
        state.tokens = (state.tokens + gained).min(f64::from(self.burst));
        state.at = now;
    }
}

fn first_in_window(state: &mut UserState, kind: Notice, now: Instant) -> bool {
    let slot = &mut state.told[kind as usize];
    match slot {
        Some(t) if now.saturating_duration_since(*t) < NOTICE_WINDOW => false,
        _ => {
            *slot = Some(now);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter(per_minute: u32, burst: Option<u32>, max_chars: usize) -> Limiter {
        Limiter::new(&LimitsConfig {
            user_messages_per_minute: per_minute,
            user_burst: burst,
            max_message_chars: max_chars,
            ..LimitsConfig::default()
        })
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_burst_passes_then_the_rate_applies_and_the_first_hit_is_told() {
        let l = limiter(6, Some(3), 100);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(l.check("tg", "u", 5, true, t0), Ok(()));
        }
        let first = l.check("tg", "u", 5, true, t0).unwrap_err();
        assert!(matches!(first.hit, Hit::TooFast { retry_after } if retry_after == secs(10)));
        assert!(first.tell);
        assert!(
            !l.check("tg", "u", 5, true, t0 + secs(1)).unwrap_err().tell,
            "told once per window"
        );
        // 6 per minute: one token every 10 s.
        assert_eq!(l.check("tg", "u", 5, true, t0 + secs(10)), Ok(()));
        assert!(l.check("tg", "u", 5, true, t0 + secs(11)).is_err());
        // A minute after the notice, the next hit is told again.
        let later = t0 + secs(61);
        let refusal = (0..10).find_map(|_| l.check("tg", "u", 5, true, later).err()).unwrap();
        assert!(refusal.tell);
    }

    #[test]
    fn users_and_channels_have_their_own_buckets() {
        let l = limiter(1, Some(1), 100);
        let t0 = Instant::now();
        assert!(l.check("tg", "a", 1, true, t0).is_ok());
        assert!(l.check("tg", "a", 1, true, t0).is_err());
        assert!(l.check("tg", "b", 1, true, t0).is_ok());
        assert!(l.check("slack", "a", 1, true, t0).is_ok());
    }

    #[test]
    fn burst_defaults_to_the_per_minute_rate() {
        let l = limiter(4, None, 100);
        let t0 = Instant::now();
        assert_eq!((0..10).filter(|_| l.check("tg", "u", 1, true, t0).is_ok()).count(), 4);
    }

    #[test]
    fn zero_per_minute_and_the_console_are_not_rate_limited() {
        let t0 = Instant::now();
        let off = limiter(0, None, 100);
        assert!((0..1000).all(|_| off.check("tg", "u", 1, true, t0).is_ok()));
        let l = limiter(1, Some(1), 100);
        assert!((0..1000).all(|_| l.check("console", "me", 1, false, t0).is_ok()));
    }

    #[test]
    fn long_messages_are_refused_and_told_once_per_window() {
        let l = limiter(0, None, 10);
        let t0 = Instant::now();
        assert!(l.check("tg", "u", 10, true, t0).is_ok(), "exactly the limit passes");
        let hit = l.check("tg", "u", 11, true, t0).unwrap_err();
        assert_eq!(
            hit,
            Refusal {
                hit: Hit::TooLong { chars: 11, limit: 10 },
                tell: true
            }
        );
        assert!(!l.check("tg", "u", 500, true, t0 + secs(5)).unwrap_err().tell);
        assert!(l.check("tg", "u", 500, true, t0 + secs(60)).unwrap_err().tell);
        assert!(hit.hit.reply().contains("too long"));
    }

    #[test]
    fn an_oversized_message_still_costs_a_token() {
        let l = limiter(1, Some(1), 10);
        let t0 = Instant::now();
        assert!(matches!(
            l.check("tg", "u", 99, true, t0).unwrap_err().hit,
            Hit::TooLong { .. }
        ));
        assert!(matches!(
            l.check("tg", "u", 1, true, t0).unwrap_err().hit,
            Hit::TooFast { .. }
        ));
    }

    #[test]
    fn a_full_queue_is_told_once_per_window() {
        let l = limiter(10, None, 10);
        let t0 = Instant::now();
        assert!(l.tell_queue_full("tg", "u", t0));
        assert!(!l.tell_queue_full("tg", "u", t0 + secs(30)));
        assert!(l.tell_queue_full("tg", "u", t0 + secs(60)));
    }

    #[test]
    fn idle_users_are_forgotten_when_many_are_tracked() {
        let l = limiter(60, Some(1), 10);
        let t0 = Instant::now();
        for u in 0..MAX_TRACKED {
            l.check("tg", &u.to_string(), 1, true, t0).unwrap();
        }
        // A minute later every bucket is full again, so all may go.
        l.check("tg", "new", 1, true, t0 + secs(60)).unwrap();
        assert_eq!(l.lock().len(), 1);
    }
}
