//! The synthetic long conversations of the recall benchmark: per user,
//! weeks of dated sessions of everyday chatter (with distractors that share
//! the facts' words), with facts planted in them, and the questions whose
//! answers those facts are, each with the ids of the turns that answer it.
//!
//! Deterministic (a seeded SplitMix64), so every run measures the same
//! conversations. Pure data: no I/O, no broker.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};

/// What a question tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// One turn holds the answer.
    SingleHop,
    /// Two turns, days apart, each hold half of it, and the question names
    /// what links them ("my sister": "my sister is Ana" … "Ana moved to
    /// Lisbon"). Issue 13's "multi-hop"; kept as it was for comparison.
    TwoPart,
    /// Two or three turns, days apart, joined through a person the
    /// question never names: "which city is the friend I met at the
    /// climbing gym moving to?" needs "I met Sam at the climbing gym" and
    /// "Sam is moving to Porto", and the last turn of a chain shares no
    /// word with the question (issue 41).
    MultiHop,
    /// The answer is when something was said (the item's date).
    Temporal,
    /// A fact that changed: the later turn answers.
    Updated,
    /// The answer's words are not in the question: a category ("what
    /// instrument do I play?" — "I practised the cello") or a paraphrase
    /// ("what is my profession?" — "another long shift on the ward").
    OpenDomain,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::SingleHop,
        Kind::TwoPart,
        Kind::MultiHop,
        Kind::Temporal,
        Kind::Updated,
        Kind::OpenDomain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::SingleHop => "single-hop",
            Kind::TwoPart => "two-part (named link)",
            Kind::MultiHop => "multi-hop (2–3 turns)",
            Kind::Temporal => "temporal",
            Kind::Updated => "updated-fact",
            Kind::OpenDomain => "open-domain",
        }
    }
}

/// One user turn of the history.
#[derive(Clone, Debug)]
pub struct Turn {
    pub id: String,
    pub at: DateTime<Utc>,
    pub text: String,
}

/// A question and the ids of the turns that answer it.
#[derive(Clone, Debug)]
pub struct Question {
    pub kind: Kind,
    pub text: String,
    pub answer_ids: Vec<String>,
}

/// One user's history (chronological) and questions.
#[derive(Clone, Debug)]
pub struct Conversation {
    pub user: String,
    pub turns: Vec<Turn>,
    pub questions: Vec<Question>,
}

/// SplitMix64: small, seeded, good enough to pick words.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const NAMES: &[&str] = &[
    "Ana", "Bruno", "Chloe", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ivan", "Jonas", "Kemal", "Lena", "Mateo",
    "Nia", "Omar", "Priya", "Quentin", "Rosa", "Sven", "Tariq",
];
const CITIES: &[&str] = &[
    "Lisbon", "Oslo", "Kyoto", "Quito", "Tunis", "Perth", "Riga", "Cusco", "Porto", "Hanoi", "Graz", "Cork",
];
const COMPANIES: &[&str] = &[
    "Acme",
    "Globex",
    "Initech",
    "Hooli",
    "Vandelay",
    "Soylent",
    "Tyrell",
    "Cyberdyne",
    "Wonka",
    "Oscorp",
];
const PETS: &[&str] = &["greyhound", "parrot", "tortoise", "ferret", "beagle", "cockatoo"];
const PET_NAMES: &[&str] = &[
    "Pixel", "Biscuit", "Mango", "Zorro", "Pepper", "Noodle", "Waffle", "Comet",
];
const HOBBIES: &[&str] = &[
    "bouldering",
    "pottery",
    "fencing",
    "birdwatching",
    "woodcarving",
    "salsa dancing",
];
const LANGUAGES: &[&str] = &["Portuguese", "Japanese", "Swahili", "Finnish", "Korean", "Turkish"];
const STREETS: &[&str] = &[
    "Elm", "Juniper", "Harbour", "Mill", "Orchard", "Quarry", "Linden", "Chapel",
];
const ALLERGENS: &[&str] = &["penicillin", "hazelnuts", "shellfish", "latex", "sesame", "kiwi fruit"];
const PROJECTS: &[&str] = &[
    "quarterly budget",
    "vendor audit",
    "hiring plan",
    "migration",
    "pricing review",
];

/// Everyday chatter; many share words with the facts (dentist, work,
/// phone, marathon, sister, vet…) so that matching a single word is not
/// enough.
const CHATTER: &[&str] = &[
    "The weather was grey again, I stayed in and read.",
    "Work was busy today, too many meetings back to back.",
    "My phone battery died on the bus, so annoying.",
    "We talked about marathons at lunch, everyone has an opinion.",
    "The dentist near the office had a queue out the door.",
    "My sister called about weekend plans, nothing decided yet.",
    "The vet clinic sent a newsletter about vaccinations.",
    "I cooked a big pot of lentil soup for the week.",
    "Thinking about learning a language again, maybe next year.",
    "A friend from school posted photos from a wedding.",
    "My manager was out sick, so the day was calm.",
    "The gym was packed, I gave up on the squat rack.",
    "I finally fixed the squeaky door in the hallway.",
    "Watched a documentary about deep sea creatures.",
    "Traffic was terrible, the ring road was closed.",
    "Our wifi kept dropping during a video call.",
    "I tried a new coffee place, the flat white was decent.",
    "Spent the evening sorting old photos into albums.",
    "The train was late again, twenty minutes this time.",
    "Bought new running shoes, they feel a bit stiff.",
    "Had a long chat with a neighbour about the garden.",
    "My flat is cold in the mornings, the heating is slow.",
    "I am reading a novel set in a lighthouse.",
    "The supermarket was out of oat milk, again.",
];

/// Chatter about people: the names of the planted facts come up in
/// everyday talk too (`{}` is a name), so a name alone does not point to
/// a fact.
const NAMED_CHATTER: &[&str] = &[
    "{} sent me a funny video of a cat on a skateboard.",
    "Had lunch with {}, we mostly talked about nothing.",
    "{} is thinking of moving house, again.",
    "{} told me about a new series everyone is watching.",
    "Bumped into {} at the station this morning.",
    "{} asked if I could help with a spreadsheet.",
];

/// Chatter near the open questions' categories (someone else's music,
/// sport, food, vehicles, work), so the category alone is not enough.
const NEAR_CHATTER: &[&str] = &[
    "A busker at the station was playing the accordion.",
    "Watched the tennis final on TV with the sound off.",
    "Colleagues went out for sushi, I skipped it.",
    "Saw a vintage tractor parked outside the bakery.",
    "The pharmacist was very kind about my prescription.",
    "My neighbour's teenager is learning the drums, loudly.",
];

const CHAIN_PETS: &[&str] = &[
    "beagle",
    "tabby kitten",
    "lop-eared rabbit",
    "cockatiel",
    "greyhound",
    "hedgehog",
];
const PROFESSIONS: &[&str] = &[
    "radiographer",
    "anaesthetist",
    "paramedic",
    "midwife",
    "physiotherapist",
    "pathologist",
];

/// Multi-hop chains: the turns (`{P}`, `{Q}` the linking people, `{X}`
/// the answer) and the question, which names neither person.
const CHAINS: &[(&[&str], &str)] = &[
    (
        &[
            "I met {P} at the climbing gym, we ended up chatting for ages.",
            "{P} told me she is moving to {X} in the spring.",
        ],
        "Which city is the friend I met at the climbing gym moving to?",
    ),
    (
        &[
            "{P} from my book club lent me a thriller.",
            "{P} adopted a {X} from the shelter, photos all week.",
        ],
        "What animal does the person from my book club have now?",
    ),
    (
        &[
            "My cousin {P} is getting married in June.",
            "{P}'s fiancé is called {Q}, they met at university.",
            "{Q} works as a {X} at the hospital.",
        ],
        "What does my cousin's fiancé do for a living?",
    ),
    (
        &[
            "My old flatmate {P} finally called me back.",
            "{P} introduced me to her brother {Q} at the party.",
            "{Q} is opening a bakery in {X} next year.",
        ],
        "Where is my old flatmate's brother starting his business?",
    ),
];

/// Open questions: the turn (`{X}` one of the choices) and the question,
/// which shares no word with it.
const OPEN: &[(&str, &[&str], &str)] = &[
    (
        "I practised the {X} for an hour tonight, my fingers hurt.",
        &["cello", "violin", "trombone", "banjo", "clarinet", "harp"],
        "What instrument do I play?",
    ),
    (
        "Signed up for {X} lessons at the leisure centre, first class on Monday.",
        &["judo", "rowing", "squash", "archery", "fencing", "badminton"],
        "Which sport did I take up?",
    ),
    (
        "Picked up my second-hand {X} from the dealer, it runs great.",
        &["motorbike", "campervan", "scooter", "pickup truck", "hatchback"],
        "What kind of vehicle did I buy?",
    ),
    (
        "Nothing beats a bowl of {X} on a Friday night.",
        &["ramen", "pho", "paella", "goulash", "laksa", "bibimbap"],
        "What is my favourite food?",
    ),
    (
        "{X}",
        &[
            "Another long shift on the ward, three patients admitted before lunch.",
            "Marked thirty essays tonight, my pupils are finally getting commas.",
            "Service was chaos tonight, I burned two risottos on the line.",
        ],
        "What is my profession?",
    ),
];

fn day(start: NaiveDate, offset: i64, minute: i64) -> DateTime<Utc> {
    (start + TimeDelta::days(offset))
        .and_hms_opt(9, 0, 0)
        .map_or_else(Utc::now, |t| t.and_utc())
        + TimeDelta::minutes(minute)
}

/// One user's `days` of conversation with `sets` rounds of planted facts
/// (each round plants one fact of every kind).
pub fn conversation(seed: u64, user: &str, start: NaiveDate, days: i64, sets: usize) -> Conversation {
    let mut rng = Rng::new(seed);
    // Per day, the turns in order; facts are inserted at chosen days.
    let by_day: Vec<Vec<String>> = (0..days)
        .map(|_| {
            (0..8 + rng.below(12))
                .map(|_| match rng.below(10) {
                    0 => rng.pick(NAMED_CHATTER).replace("{}", rng.pick(NAMES)),
                    1 => rng.pick(NEAR_CHATTER).to_string(),
                    _ => rng.pick(CHATTER).to_string(),
                })
                .collect()
        })
        .collect();
    // The people of this user's chains, distinct; the chains and open
    // questions a user gets start at a user's own offset, so users differ.
    let mut people: Vec<&str> = NAMES.to_vec();
    for i in (1..people.len()).rev() {
        people.swap(i, rng.below(i + 1));
    }
    let (chain_from, open_from) = (rng.below(CHAINS.len()), rng.below(OPEN.len()));
    let mut plants: Vec<(i64, String, usize)> = Vec::new(); // (day, text, question index)
    let mut questions: Vec<(Kind, String, usize)> = Vec::new(); // (kind, text, facts needed)
    let span = days.max(4);
    let at = |rng: &mut Rng, lo: i64, hi: i64| lo + rng.below((hi - lo).max(1) as usize) as i64;
    for set in 0..sets {
        let q = questions.len();
        // Single hop.
        let (pet, pet_name) = (rng.pick(PETS), rng.pick(PET_NAMES));
        let singles = [
            (
                format!(
                    "My dentist is Dr. {} at the clinic on {} Street.",
                    rng.pick(NAMES),
                    rng.pick(STREETS)
                ),
                "What is the name of my dentist?".to_string(),
            ),
            (
                format!("My {pet} is called {pet_name}{set}."),
                format!("What is my {pet}'s name?"),
            ),
            (
                format!("Just so you know, I'm allergic to {}.", rng.pick(ALLERGENS)),
                "What am I allergic to?".to_string(),
            ),
            (
                format!("My locker at the gym is number {}.", 100 + rng.below(900)),
                "Which locker number do I have at the gym?".to_string(),
            ),
        ];
        let (fact, question) = singles[set % singles.len()].clone();
        plants.push((at(&mut rng, 0, span - 2), fact, q));
        questions.push((Kind::SingleHop, question, 1));

        // Multi hop: two turns, days apart.
        let person = format!("{}{}", rng.pick(NAMES), ["", "a", "o", "y"][set % 4]);
        let multis = [
            (
                format!("My sister is called {person}."),
                format!("{person} just moved to {} for a new job.", rng.pick(CITIES)),
                "Which city did my sister move to?",
            ),
            (
                format!("My best friend from school is {person}."),
                format!("{person} got me into {} last year.", rng.pick(HOBBIES)),
                "Which hobby did my best friend from school get me into?",
            ),
            (
                format!("My manager's name is {person}."),
                format!("{person} wants the {} report by Friday.", rng.pick(PROJECTS)),
                "Which report does my manager want from me?",
            ),
        ];
        let (first, second, question) = multis[set % multis.len()].clone();
        let d1 = at(&mut rng, 0, span / 2);
        plants.push((d1, first, q + 1));
        plants.push((at(&mut rng, d1 + 1, span - 1), second, q + 1));
        questions.push((Kind::TwoPart, question.to_string(), 2));

        // Temporal: the date of the turn is the answer.
        let place = format!("{}{}", rng.pick(CITIES), ["", "burg", "ville"][set % 3]);
        let temporals = [
            (
                format!("I ran the {place} half marathon this morning!"),
                format!("When did I run the {place} half marathon?"),
            ),
            (
                format!("Today I signed the lease for the flat in {place}."),
                format!("When did I sign the lease for the flat in {place}?"),
            ),
            (
                format!("Just got back from the {place} vet with {pet_name}, she needed stitches."),
                format!("When did I take {pet_name} to the {place} vet?"),
            ),
        ];
        let (fact, question) = temporals[set % temporals.len()].clone();
        plants.push((at(&mut rng, 0, span - 1), fact, q + 2));
        questions.push((Kind::Temporal, question, 1));

        // Updated fact: the later statement answers.
        let updates = [
            (
                format!("I work at {} as a data analyst.", rng.pick(COMPANIES)),
                format!("Big news: I changed jobs, I now work at {}.", rng.pick(COMPANIES)),
                "Where do I work now?",
            ),
            (
                format!("My phone number is 07{}.", 100_000 + rng.below(900_000)),
                format!("I got a new phone number: 07{}.", 100_000 + rng.below(900_000)),
                "What is my current phone number?",
            ),
            (
                format!("I'm learning {} on weekends.", rng.pick(LANGUAGES)),
                format!("I switched my weekend lessons to {}.", rng.pick(LANGUAGES)),
                "Which language am I learning now?",
            ),
        ];
        let (old, new, question) = updates[set % updates.len()].clone();
        let d1 = at(&mut rng, 0, span / 2);
        plants.push((d1, old, usize::MAX));
        plants.push((at(&mut rng, d1 + 1, span - 1), new, q + 3));
        questions.push((Kind::Updated, question.to_string(), 1));

        // Multi-hop through unnamed people: each turn of the chain on a
        // later day than the one before.
        let (chain, question) = CHAINS[(chain_from + set) % CHAINS.len()];
        let (p, q2) = (people[2 * set], people[2 * set + 1]);
        let answer = match chain.len() {
            2 if question.contains("city") => rng.pick(CITIES),
            2 => rng.pick(CHAIN_PETS),
            _ if question.contains("living") => rng.pick(PROFESSIONS),
            _ => rng.pick(CITIES),
        };
        let mut from = 0;
        for (i, text) in chain.iter().enumerate() {
            let left = (chain.len() - i) as i64;
            let d = at(&mut rng, from, span - left);
            from = d + 1;
            let text = text.replace("{P}", p).replace("{Q}", q2).replace("{X}", answer);
            plants.push((d, text, q + 4));
        }
        questions.push((Kind::MultiHop, question.to_string(), chain.len()));

        // Open-domain: the answer's words are not the question's.
        let (fact, choices, question) = OPEN[(open_from + set) % OPEN.len()];
        let fact = fact.replace("{X}", rng.pick(choices));
        plants.push((at(&mut rng, 0, span - 1), fact, q + 5));
        questions.push((Kind::OpenDomain, question.to_string(), 1));
    }
    // Insert the facts at a random place of their day; remember their ids.
    let mut answer_ids: Vec<Vec<String>> = vec![Vec::new(); questions.len()];
    let mut marked: Vec<Vec<(String, usize)>> = by_day
        .iter()
        .map(|d| d.iter().map(|t| (t.clone(), usize::MAX)).collect())
        .collect();
    for (d, text, q) in plants {
        let slot = &mut marked[d as usize];
        let pos = rng.below(slot.len() + 1);
        slot.insert(pos, (text, q));
    }
    let mut turns = Vec::new();
    for (d, slot) in marked.into_iter().enumerate() {
        for (i, (text, q)) in slot.into_iter().enumerate() {
            let id = format!("{user}-d{d}-t{i}");
            if q != usize::MAX {
                answer_ids[q].push(id.clone());
            }
            turns.push(Turn {
                id,
                at: day(start, d as i64, 3 * i as i64),
                text,
            });
        }
    }
    let questions = questions
        .into_iter()
        .zip(answer_ids)
        .map(|((kind, text, needed), ids)| {
            assert_eq!(ids.len(), needed, "every planted fact has its turn");
            Question {
                kind,
                text,
                answer_ids: ids,
            }
        })
        .collect();
    Conversation {
        user: user.to_string(),
        turns,
        questions,
    }
}
