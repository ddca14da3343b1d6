//! Words and sentence templates of the synthetic memories. `{v}` is a slot value, `{old}` and
//! `{new}` the two sides of an update, `{name}` a person, `{kind}` an animal.

/// A fact whose value can change over time: the source of duplicates (paraphrases of one
/// value) and of supersession chains (the value replaced, with cue words).
pub struct Topic {
    pub name: &'static str,
    pub entity_type: &'static str,
    pub tag: &'static str,
    pub values: &'static [&'static str],
    pub paraphrases: &'static [&'static str],
    pub updates: &'static [&'static str],
}

pub static TOPICS: &[Topic] = &[
    Topic {
        name: "editor",
        entity_type: "tool",
        tag: "tools",
        values: &[
            "VS Code",
            "Neovim",
            "Emacs",
            "IntelliJ IDEA",
            "Zed",
            "Sublime Text",
            "Helix",
        ],
        paraphrases: &[
            "User writes code in {v}.",
            "User's editor of choice is {v}.",
            "User does most of their programming in {v}.",
            "User prefers {v} for editing code.",
        ],
        updates: &[
            "User switched from {old} to {new} as their main editor.",
            "User now uses {new} instead of {old} for coding.",
            "User no longer uses {old}; they moved to {new}.",
        ],
    },
    Topic {
        name: "vector_store",
        entity_type: "tool",
        tag: "tools",
        values: &[
            "Pinecone", "pgvector", "Qdrant", "Weaviate", "Milvus", "Chroma", "LanceDB",
        ],
        paraphrases: &[
            "User uses {v} for vector search.",
            "User's project stores its embeddings in {v}.",
            "User relies on {v} as their vector database.",
            "For similarity search, user runs {v}.",
        ],
        updates: &[
            "User moved from {old} to {new} for vector search.",
            "User now stores embeddings in {new} instead of {old}.",
            "User replaced {old} with {new} as their vector database.",
        ],
    },
    Topic {
        name: "language",
        entity_type: "tool",
        tag: "tools",
        values: &[
            "Rust",
            "Python",
            "Go",
            "TypeScript",
            "Kotlin",
            "Elixir",
            "Haskell",
        ],
        paraphrases: &[
            "User's main programming language is {v}.",
            "User writes most of their code in {v}.",
            "User is most productive in {v}.",
        ],
        updates: &[
            "User switched their main language from {old} to {new}.",
            "User now writes most of their code in {new} rather than {old}.",
        ],
    },
    Topic {
        name: "employer",
        entity_type: "organization",
        tag: "work",
        values: &[
            "Acme Robotics",
            "Globex",
            "Initech",
            "Umbrella Health",
            "Stark Analytics",
            "Wayne Logistics",
            "Hooli",
            "Vandelay Imports",
        ],
        paraphrases: &[
            "User works at {v}.",
            "User is employed by {v}.",
            "User's employer is {v}.",
            "User has a job at {v}.",
        ],
        updates: &[
            "User left {old} and now works at {new}.",
            "User started a new job at {new} after leaving {old}.",
            "User no longer works at {old}; they joined {new}.",
        ],
    },
    Topic {
        name: "city",
        entity_type: "place",
        tag: "places",
        values: &[
            "Lisbon",
            "Berlin",
            "Toronto",
            "Austin",
            "Kyoto",
            "Melbourne",
            "Nairobi",
            "Oslo",
        ],
        paraphrases: &[
            "User lives in {v}.",
            "User's home is in {v}.",
            "User is based in {v}.",
            "User resides in {v}.",
        ],
        updates: &[
            "User moved from {old} to {new}.",
            "User now lives in {new} after leaving {old}.",
            "User relocated to {new}; they no longer live in {old}.",
        ],
    },
    Topic {
        name: "phone",
        entity_type: "tool",
        tag: "tools",
        values: &[
            "an iPhone 13",
            "a Pixel 8",
            "a Galaxy S23",
            "a Fairphone 5",
            "an iPhone 15",
        ],
        paraphrases: &[
            "User's phone is {v}.",
            "User uses {v} as their phone.",
            "User carries {v}.",
        ],
        updates: &[
            "User replaced {old} with {new}.",
            "User switched from {old} to {new} as their phone.",
        ],
    },
    Topic {
        name: "diet",
        entity_type: "concept",
        tag: "preferences",
        values: &[
            "vegetarian",
            "vegan",
            "pescatarian",
            "on a low-carb diet",
            "gluten-free",
        ],
        paraphrases: &[
            "User is {v}.",
            "User follows a diet: they are {v}.",
            "When it comes to food, user is {v}.",
        ],
        updates: &[
            "User used to be {old} but is now {new}.",
            "User is no longer {old}; they are now {new}.",
        ],
    },
    Topic {
        name: "gym",
        entity_type: "place",
        tag: "habits",
        values: &[
            "the climbing gym downtown",
            "a CrossFit box near work",
            "the community pool",
            "a yoga studio",
        ],
        paraphrases: &[
            "User trains at {v}.",
            "User works out at {v}.",
            "User's usual place to exercise is {v}.",
        ],
        updates: &[
            "User stopped going to {old} and now trains at {new}.",
            "User switched from {old} to {new} for exercise.",
        ],
    },
    Topic {
        name: "laptop",
        entity_type: "tool",
        tag: "tools",
        values: &[
            "a MacBook Pro",
            "a ThinkPad X1",
            "a Framework 13",
            "a Dell XPS 13",
            "a Surface Laptop",
        ],
        paraphrases: &[
            "User works on {v}.",
            "User's laptop is {v}.",
            "User does their day-to-day work on {v}.",
        ],
        updates: &[
            "User replaced {old} with {new}.",
            "User now works on {new}; they retired {old}.",
        ],
    },
    Topic {
        name: "notes_app",
        entity_type: "tool",
        tag: "tools",
        values: &["Notion", "Obsidian", "Logseq", "Apple Notes", "Bear"],
        paraphrases: &[
            "User keeps their notes in {v}.",
            "User's note-taking app is {v}.",
            "User writes everything down in {v}.",
        ],
        updates: &[
            "User migrated their notes from {old} to {new}.",
            "User switched from {old} to {new} for notes.",
        ],
    },
    Topic {
        name: "car",
        entity_type: "tool",
        tag: "places",
        values: &[
            "a Toyota Corolla",
            "a Tesla Model 3",
            "a Volkswagen Golf",
            "a Honda Civic",
            "a Kia Niro",
        ],
        paraphrases: &[
            "User drives {v}.",
            "User's car is {v}.",
            "User gets around in {v}.",
        ],
        updates: &[
            "User sold {old} and bought {new}.",
            "User now drives {new} instead of {old}.",
        ],
    },
    Topic {
        name: "music_service",
        entity_type: "tool",
        tag: "preferences",
        values: &[
            "Spotify",
            "Apple Music",
            "Tidal",
            "YouTube Music",
            "Bandcamp",
        ],
        paraphrases: &[
            "User listens to music on {v}.",
            "User's music streaming service is {v}.",
            "User streams their music through {v}.",
        ],
        updates: &[
            "User cancelled {old} and moved to {new}.",
            "User now streams music on {new} instead of {old}.",
        ],
    },
];

/// Stable preferences and habits: each entry is one fact in several wordings.
pub static STATEMENTS: &[(&str, &[&str])] = &[
    (
        "preferences",
        &[
            "User prefers dark mode.",
            "User likes a dark theme in their apps.",
            "User always switches apps to dark mode.",
        ],
    ),
    (
        "preferences",
        &[
            "User drinks their coffee black.",
            "User takes coffee without milk or sugar.",
            "User prefers black coffee.",
        ],
    ),
    (
        "preferences",
        &[
            "User prefers concise answers without bullet points.",
            "User likes short replies written as prose, not lists.",
            "User wants brief answers and dislikes bullet lists.",
        ],
    ),
    (
        "preferences",
        &[
            "User prefers a window seat on flights.",
            "User always books the window seat when flying.",
            "On planes, user likes to sit by the window.",
        ],
    ),
    (
        "preferences",
        &[
            "User indents code with spaces, not tabs.",
            "User prefers spaces over tabs.",
            "User's code style uses spaces for indentation.",
        ],
    ),
    (
        "habits",
        &[
            "User runs every morning.",
            "User goes for a run each morning.",
            "Morning runs are part of user's daily routine.",
        ],
    ),
    (
        "habits",
        &[
            "User meditates for ten minutes before work.",
            "User does a ten-minute meditation before starting work.",
            "Before work, user meditates for about ten minutes.",
        ],
    ),
    (
        "habits",
        &[
            "User reads a novel before bed.",
            "User reads fiction every night before sleeping.",
            "Reading a novel at bedtime is a habit of user's.",
        ],
    ),
    (
        "habits",
        &[
            "User cycles to work.",
            "User commutes to the office by bike.",
            "User rides a bicycle to work.",
        ],
    ),
    (
        "habits",
        &[
            "User journals on Sunday evenings.",
            "User writes in a journal every Sunday night.",
            "Sunday evenings are when user journals.",
        ],
    ),
    (
        "preferences",
        &[
            "User dislikes early morning meetings.",
            "User avoids scheduling meetings before 10am.",
            "User does not like meetings early in the morning.",
        ],
    ),
    (
        "preferences",
        &[
            "User enjoys jazz while working.",
            "User listens to jazz when focusing on work.",
            "Jazz is user's favourite music for working.",
        ],
    ),
];

pub static PET_KINDS: &[&str] = &["dog", "cat", "parrot", "rabbit", "tortoise"];
pub static PET_NAMES: &[&str] = &[
    "Max", "Luna", "Biscuit", "Pepper", "Mochi", "Rex", "Olive", "Nori", "Ziggy", "Juniper",
];
pub static PEOPLE: &[&str] = &[
    "Alice", "Priya", "Marco", "Kenji", "Fatima", "Sven", "Chloe", "Diego", "Amara", "Tom",
    "Ingrid", "Rafael", "Mei", "Omar", "Lena", "Tariq",
];
pub static RELATIONS: &[&str] = &[
    "sister",
    "brother",
    "friend",
    "colleague",
    "manager",
    "cousin",
    "neighbour",
    "partner",
];
pub static ROLES: &[&str] = &[
    "data engineer",
    "product designer",
    "backend developer",
    "ML researcher",
    "engineering manager",
    "nurse",
    "high-school teacher",
    "architect",
];
pub static PROJECTS: &[(&str, &str)] = &[
    ("Ledgerly", "a budgeting app"),
    ("Hearth", "a home automation hub"),
    ("Saucier", "a recipe recommender"),
    ("Gambit", "a chess engine"),
    ("Fieldnotes", "a birdwatching log"),
    ("Billfold", "a command-line tool for invoices"),
    ("Tidepool", "a tide forecast widget"),
    ("Waypoint", "a hiking route planner"),
];
pub static PROJECT_STAGES: &[&str] = &[
    "is still a prototype",
    "has a private beta with a few friends",
    "is publicly available",
    "has its first paying customers",
];
/// How a later stage of a side project is told: `{name}` and `{stage}`.
pub static PROJECT_UPDATES: &[&str] = &[
    "User's side project {name} has moved on: it {stage} now.",
    "Update on {name}: it {stage}.",
];
/// How a person's move is told: `{relation}`, `{name}`, `{old}` and `{new}`.
pub static PERSON_MOVES: &[&str] = &[
    "User's {relation} {name} moved from {old} to {new}.",
    "User's {relation} {name} no longer lives in {old}; they live in {new} now.",
];
pub static PLACES: &[&str] = &[
    "Mount Tamalpais",
    "the botanical garden",
    "Lake Bled",
    "the farmers market",
    "the city museum",
    "a jazz bar downtown",
    "the coast trail",
    "a ramen place near the station",
];
pub static EPISODES: &[&str] = &[
    "User went hiking at {place} with {name}.",
    "User had dinner at {place} with {name}.",
    "User visited {place} and took a lot of photos.",
    "User and {name} spent the afternoon at {place}.",
    "User attended a meetup about {tool} with {name}.",
    "User helped {name} debug a problem with {tool}.",
    "User cooked a curry for {name}'s birthday.",
    "User had a long call with {name} about {project}.",
    "User demoed {project} to {name}.",
    "User took {pet} to the vet for a check-up.",
];
/// Relative time words an episode may carry, with their offset in days before the memory.
pub static RELATIVE_TIMES: &[(&str, i64)] = &[
    ("yesterday", 1),
    ("two days ago", 2),
    ("last week", 7),
    ("this morning", 0),
    ("last weekend", 6),
];
pub static VERBOSE_OPENERS: &[&str] = &[
    "During a long conversation, user shared several things.",
    "User gave a lot of background in one message.",
    "In a rambling update, user covered a few topics.",
];
pub static VERBOSE_JOINERS: &[&str] =
    &["Also,", "Besides that,", "On another note,", "Separately,"];
