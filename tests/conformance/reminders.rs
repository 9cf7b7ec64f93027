//! Reminders on the seam: set, listed, cancelled and refused by the same
//! words on every store; claimed once, moved on or ended by their claim;
//! a claim nobody ended is a miss told once, in its own chat; timezone,
//! status, export and clear all cover them; one user never reaches
//! another's.

use super::specs;
use super::subject::{MAX_REMINDERS, Subject, at, chat_place};
use chrono::TimeDelta;
use mnemo_sessions::SafeName;
use mnemo_sessions::commands::{Here, remind};
use mnemo_sessions::reminders::{CLAIM_SECS, Finish};

specs![
    a_reminder_is_set_listed_and_cancelled,
    bad_times_texts_and_too_many_reminders_are_refused,
    a_due_reminder_is_claimed_once_and_ends_with_its_post,
    a_repeating_reminder_moves_to_its_next_time_and_a_failed_post_is_retried,
    a_claim_nobody_ended_is_missed_and_told_once_in_its_chat,
    the_timezone_is_kept_shown_and_used,
    export_and_clear_all_cover_reminders,
    one_user_never_lists_or_cancels_anothers_reminder,
];

/// The id in a `/session remind` confirmation.
fn id_of(reply: &str) -> String {
    let at = reply.find("(id ").expect(reply) + 4;
    reply[at..at + 6].to_string()
}

async fn a_reminder_is_set_listed_and_cancelled(s: Subject) {
    let set = s.say("ada", "remind +10m call the bank").await.text;
    assert!(
        set.starts_with("I'll remind you on Mon 30 Nov 2026 10:50 (UTC): call the bank"),
        "{set}"
    );
    let id = id_of(&set);
    let list = s.say("ada", "reminders").await.text;
    assert!(
        list.contains(&format!("• {id} — Mon 30 Nov 2026 10:50 — call the bank")),
        "{list}"
    );
    assert_eq!(
        s.say("ada", &format!("reminders cancel {id}")).await.text,
        format!("Reminder {id} is cancelled.")
    );
    assert!(
        s.say("ada", "reminders")
            .await
            .text
            .starts_with("You have no reminders.")
    );
    assert!(
        s.say("ada", &format!("reminders cancel {id}"))
            .await
            .text
            .starts_with("You have no waiting reminder")
    );
    // Nothing is left to claim.
    assert!(s.store.claim_reminders(at(200), 10).await.unwrap().is_empty());
}

async fn bad_times_texts_and_too_many_reminders_are_refused(s: Subject) {
    let refused = [
        ("remind", "Say when and what"),
        ("remind +10m", "A reminder needs words"),
        ("remind soon call", "I can't read that time"),
        ("remind 2026-11-30T08:00:00Z call", "That time has already passed."),
        ("remind +2000d call", "That is too far ahead"),
    ];
    for (command, said) in refused {
        let reply = s.say("ada", command).await.text;
        assert!(reply.starts_with(said), "{command}: {reply}");
    }
    let long = format!("remind +10m {}", "x".repeat(1001));
    assert!(s.say("ada", &long).await.text.starts_with("That reminder is too long"));
    for i in 0..MAX_REMINDERS {
        assert!(
            s.say("ada", &format!("remind +{}m tea {i}", i + 1))
                .await
                .text
                .starts_with("I'll remind you")
        );
    }
    let full = s.say("ada", "remind +1h one more").await.text;
    assert_eq!(full, mnemo_sessions::reminders::FULL);
    assert_eq!(s.user("ada").await.reminders().await.unwrap().len(), MAX_REMINDERS);
    // A repeat more often than every 10 minutes, or unreadable.
    let place = chat_place();
    let here = Here {
        place: &place,
        timezone: chrono_tz::UTC,
        max_reminders: 10,
    };
    let mut bob = s.user("bob").await;
    for (rule, said) in [
        ("*/5 * * * *", "That repeats too often"),
        ("every day", "I can't read that repeat rule"),
    ] {
        match remind::set(bob.as_mut(), here, "+1h", "stretch", Some(rule), at(100)).await {
            Err(remind::Refused::Said(reason)) => assert!(reason.starts_with(said), "{reason}"),
            other => panic!("{rule}: {other:?}"),
        }
    }
    assert!(bob.reminders().await.unwrap().is_empty());
}

async fn a_due_reminder_is_claimed_once_and_ends_with_its_post(s: Subject) {
    let id = id_of(&s.say("ada", "remind +10m call the bank").await.text);
    assert!(
        s.store.claim_reminders(at(109), 10).await.unwrap().is_empty(),
        "not yet due"
    );
    let claimed = s.store.claim_reminders(at(110), 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let (user, r) = (&claimed[0].user, &claimed[0].reminder);
    assert_eq!(
        (user, r.id.as_str(), r.text.as_str(), r.at),
        (&SafeName::of("ada"), id.as_str(), "call the bank", at(110))
    );
    assert_eq!(r.place, chat_place());
    assert!(
        s.store.claim_reminders(at(111), 10).await.unwrap().is_empty(),
        "claimed once"
    );
    // Still listed while it is posted.
    assert_eq!(s.user("ada").await.reminders().await.unwrap().len(), 1);
    s.store
        .finish_reminder(user, &id, Finish::Posted { next: None })
        .await
        .unwrap();
    assert!(s.user("ada").await.reminders().await.unwrap().is_empty());
    assert!(s.store.claim_reminders(at(10_000), 10).await.unwrap().is_empty());
    assert!(s.user("ada").await.take_missed("c1").await.unwrap().is_empty());
}

async fn a_repeating_reminder_moves_to_its_next_time_and_a_failed_post_is_retried(s: Subject) {
    let place = chat_place();
    let here = Here {
        place: &place,
        timezone: chrono_tz::UTC,
        max_reminders: 10,
    };
    let mut ada = s.user("ada").await;
    let set = remind::set(
        ada.as_mut(),
        here,
        "+60m",
        "weekly goals",
        Some("40 11 * * MON"),
        at(100),
    )
    .await;
    let set = set.unwrap();
    drop(ada);
    assert_eq!(set.at, at(160));
    let claimed = s.store.claim_reminders(at(160), 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let next = claimed[0].reminder.next_after(at(160)).unwrap();
    assert_eq!(next, at(160) + TimeDelta::days(7));
    // The post failed: tried again later, not before.
    let retry = at(161);
    s.store
        .finish_reminder(&claimed[0].user, &set.id, Finish::Retry { at: retry })
        .await
        .unwrap();
    assert!(s.store.claim_reminders(at(160), 10).await.unwrap().is_empty());
    let again = s.store.claim_reminders(retry, 10).await.unwrap();
    assert_eq!(
        (again.len(), again[0].reminder.attempts, again[0].reminder.at),
        (1, 1, at(160))
    );
    s.store
        .finish_reminder(&again[0].user, &set.id, Finish::Posted { next: Some(next) })
        .await
        .unwrap();
    let waiting = s.user("ada").await.reminders().await.unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!((waiting[0].at, waiting[0].due, waiting[0].attempts), (next, next, 0));
    assert!(
        s.store
            .claim_reminders(next - TimeDelta::seconds(1), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        s.store.claim_reminders(next, 10).await.unwrap().len(),
        1,
        "and fires again"
    );
}

async fn a_claim_nobody_ended_is_missed_and_told_once_in_its_chat(s: Subject) {
    let id = id_of(&s.say("ada", "remind +10m call the bank").await.text);
    let claimed = s.store.claim_reminders(at(110), 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    // The broker that claimed it died posting it.
    let later = at(110) + TimeDelta::seconds(CLAIM_SECS);
    assert!(
        s.store.claim_reminders(later, 10).await.unwrap().is_empty(),
        "never posted twice"
    );
    assert!(s.user("ada").await.reminders().await.unwrap().is_empty());
    assert!(
        s.user("ada")
            .await
            .take_missed("another chat")
            .await
            .unwrap()
            .is_empty()
    );
    let missed = s.user("ada").await.take_missed("c1").await.unwrap();
    assert_eq!(missed.len(), 1);
    assert_eq!((missed[0].id.as_str(), missed[0].at), (id.as_str(), at(110)));
    let notice = remind::missed_notice(&missed).unwrap();
    assert!(notice.contains("Mon 30 Nov 2026 10:50: call the bank"), "{notice}");
    assert!(
        s.user("ada").await.take_missed("c1").await.unwrap().is_empty(),
        "told once"
    );
    // The claim ends late (its broker came back): nothing changes.
    s.store
        .finish_reminder(&SafeName::of("ada"), &id, Finish::Posted { next: None })
        .await
        .unwrap();
    assert!(s.user("ada").await.reminders().await.unwrap().is_empty());
}

async fn the_timezone_is_kept_shown_and_used(s: Subject) {
    assert!(
        s.say("ada", "timezone")
            .await
            .text
            .starts_with("You have not set a timezone; I use UTC")
    );
    assert!(
        s.say("ada", "timezone Mars/Olympus")
            .await
            .text
            .starts_with("I don't know that time zone")
    );
    assert!(
        s.say("ada", "timezone ../../etc")
            .await
            .text
            .starts_with("I don't know that time zone")
    );
    assert!(
        s.say("ada", "timezone America/New_York")
            .await
            .text
            .starts_with("Your timezone is now America/New_York.")
    );
    assert_eq!(
        s.say("ada", "timezone").await.text,
        "Your timezone is America/New_York."
    );
    let status = s.say("ada", "status").await.text;
    assert!(
        status.contains("• 0 reminders waiting; timezone America/New_York"),
        "{status}"
    );
    // 10:50 UTC is 05:50 in New York.
    let set = s.say("ada", "remind +10m call the bank").await.text;
    assert!(
        set.starts_with("I'll remind you on Mon 30 Nov 2026 05:50 (America/New_York)"),
        "{set}"
    );
    assert!(s.say("ada", "status").await.text.contains("• 1 reminder waiting"));
    assert!(
        s.say("bob", "status")
            .await
            .text
            .contains("• 0 reminders waiting; timezone UTC (the bot's")
    );
}

async fn export_and_clear_all_cover_reminders(s: Subject) {
    s.say("ada", "timezone Europe/Lisbon").await;
    s.say("ada", "remind +10m call the bank").await;
    s.say("bob", "remind +10m bob's secret errand").await;
    let bundle = s.say("ada", "export").await.export.unwrap();
    let files = super::lifecycle::unpack(&bundle);
    let (_, book) = files
        .iter()
        .find(|(name, _)| name.ends_with(".json") && name.contains("reminders/"))
        .unwrap_or_else(|| panic!("{:?}", files.iter().map(|f| &f.0).collect::<Vec<_>>()));
    assert!(
        book.contains("call the bank") && book.contains("Europe/Lisbon"),
        "{book}"
    );
    assert!(files.iter().all(|(_, text)| !text.contains("secret errand")));
    let preview = s.say("ada", "clear all").await.text;
    assert!(!preview.contains(" 0 "), "{preview}");
    s.say("ada", "clear all confirm").await;
    let mut ada = s.user("ada").await;
    assert!(ada.reminders().await.unwrap().is_empty());
    assert_eq!(ada.timezone().await.unwrap(), None);
    drop(ada);
    let due = s.store.claim_reminders(at(120), 10).await.unwrap();
    assert_eq!(
        due.iter().map(|c| c.user.as_str()).collect::<Vec<_>>(),
        ["bob"],
        "only bob's is left"
    );
}

async fn one_user_never_lists_or_cancels_anothers_reminder(s: Subject) {
    let id = id_of(&s.say("ada", "remind +10m call the bank").await.text);
    assert!(
        s.say("bob", "reminders")
            .await
            .text
            .starts_with("You have no reminders.")
    );
    assert!(
        s.say("bob", &format!("reminders cancel {id}"))
            .await
            .text
            .starts_with("You have no waiting reminder")
    );
    assert_eq!(s.user("ada").await.reminders().await.unwrap().len(), 1);
    assert!(s.user("bob").await.take_missed("c1").await.unwrap().is_empty());
}
