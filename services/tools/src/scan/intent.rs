//! Combination rules: what a sentence asks of the model, whatever the wording.
//!
//! A description describes its tool ("Executes a shell command", "Reads a file").
//! Poisoning addresses the model: an imperative ("Run …", "Before answering, call
//! …") or a modal obligation ("you must execute …", "always read …"). A finding
//! here needs three things in one sentence: a verb in its base form that the
//! sentence addresses to the model ([`address`]), the action class of that verb and
//! its object (run a command, touch files, call a tool, visit a URL), and that the
//! action is not the tool's own function ([`Profile`]): "run the command" on a shell
//! tool is what the tool does. A negated instruction ("never run shell commands
//! here") is a restriction, not an attack.
//!
//! Authority markers (`IMPORTANT`, `CRITICAL SYSTEM MAINTENANCE`, "note to the AI",
//! "before you can solve the task") make nothing by themselves; they raise an
//! `override-instructions` finding when the text they introduce asks for an action
//! outside the tool ([`authority`]).

use super::*;

/// What the scanner knows of the tool whose text it reads: its name, the names of
/// its server's other tools, and what it does (from the words of its name and the
/// first sentence of its description).
#[derive(Clone, Debug, Default)]
pub(super) struct Profile<'p> {
    /// The tool's bare name ("" when unknown, as for [`scan_text`]).
    pub(super) name: &'p str,
    /// Bare names of this server's tools.
    pub(super) own: &'p [String],
    /// The tool runs commands (shell, terminal, exec, ssh…).
    pub(super) runs_commands: bool,
    /// The tool reads or writes files.
    pub(super) files: bool,
    /// The tool opens URLs (browser, fetch, scrape…).
    pub(super) browses: bool,
    /// The tool is about secrets (a scanner, a vault): naming credential files is
    /// its function.
    pub(super) secrets: bool,
}

/// Words of a tool's name and first sentence that say what it does.
static RUNS_COMMANDS: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)(?:\b|_)(?:shell|commands?|terminal|exec|execute|executes|bash|zsh|powershell|cmd|process(?:es)?|scripts?|ssh|console|cli|run_code|subprocess|sandbox|repl|interpreter)(?:\b|_)",
    )
});
static FILES: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)(?:\b|_)(?:files?|filesystem|fs|director(?:y|ies)|dirs?|folders?|paths?|disk|workspace|documents?|notes?|edit|editor|repo|repository|codebase|project|code)(?:\b|_)",
    )
});
static SECRETS: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)(?:\b|_)(?:secrets?|credentials?|leaks?|vault|keychain|passwords?|ssh|gitleaks|trufflehog|security|audit)(?:\b|_)",
    )
});
static BROWSES: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)(?:\b|_)(?:browser|browse|browsing|navigate|navigation|urls?|pages?|web|website|fetch|scrape|scraper|crawl|crawler|http|https|playwright|puppeteer|selenium|screenshot|links?|download|request)(?:\b|_)",
    )
});

impl<'p> Profile<'p> {
    pub(super) fn new(name: &'p str, description: &str, own: &'p [String]) -> Profile<'p> {
        let first = first_sentence(description);
        let about = |re: &Regex| re.is_match(name) || re.is_match(first);
        Profile {
            name,
            own,
            runs_commands: about(&RUNS_COMMANDS),
            files: about(&FILES),
            browses: about(&BROWSES),
            secrets: about(&SECRETS),
        }
    }

    /// Whether `reference` (as written, without quotes) names this tool or one of
    /// its server's tools.
    fn is_own(&self, reference: &str) -> bool {
        let bare = reference.rsplit_once('.').map_or(reference, |(_, b)| b);
        // `own` may be namespaced (`mongodb.collection-indexes`), as the catalog
        // gives it.
        let same = |n: &str| {
            let n_bare = n.rsplit_once('.').map_or(n, |(_, b)| b);
            n.eq_ignore_ascii_case(reference) || n_bare.eq_ignore_ascii_case(bare)
        };
        same(self.name) || self.own.iter().any(|n| same(n))
    }
}

/// At most the first 200 bytes up to the first sentence end.
/// A plain lower-case word (no `_`, `-`, `.`, digits or capitals).
fn plain(word: &str) -> bool {
    word.bytes().all(|b| b.is_ascii_lowercase())
}

fn first_sentence(text: &str) -> &str {
    let head = &text[..floor_char_boundary(text, 200)];
    let end = head
        .match_indices(['.', '!', '?', '\n'])
        .map(|(i, _)| i)
        .find(|&i| head[i + 1..].chars().next().is_none_or(char::is_whitespace))
        .unwrap_or(head.len());
    &head[..end]
}

// ---------------------------------------------------------------------------------
// Sentences and who they address

/// Start offsets of the sentences of `text`: a sentence ends at `!`, `?`, `;`, a
/// newline, or a `.` followed by a space.
pub(super) struct Sentences {
    starts: Vec<usize>,
    len: usize,
}

impl Sentences {
    pub(super) fn new(text: &str) -> Sentences {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        for (i, &b) in bytes.iter().enumerate() {
            let end = match b {
                b'!' | b'?' | b';' | b'\n' => true,
                b'.' => bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace()),
                // The last byte of the full stops of Japanese and Chinese, and of
                // the full-width `！`, `？` and `；`: 。 (E3 80 82), ！ (EF BC 81),
                // ？ (EF BC 9F), ； (EF BC 9B).
                0x82 => i >= 2 && bytes[i - 2..i] == [0xE3, 0x80],
                0x81 | 0x9F | 0x9B => i >= 2 && bytes[i - 2..i] == [0xEF, 0xBC],
                _ => false,
            };
            if end {
                starts.push(i + 1);
            }
        }
        Sentences {
            starts,
            len: text.len(),
        }
    }

    /// Every sentence, in order.
    pub(super) fn spans(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.starts.iter().enumerate().map(|(i, &start)| {
            let end = self.starts.get(i + 1).copied().unwrap_or(self.len);
            start..end
        })
    }

    /// The sentence holding byte `pos`.
    pub(super) fn around(&self, pos: usize) -> Range<usize> {
        let i = self.starts.partition_point(|&s| s <= pos).saturating_sub(1);
        let start = self.starts.get(i).copied().unwrap_or(0);
        let end = self.starts.get(i + 1).copied().unwrap_or(self.len);
        start..end
    }
}

/// How the text before a verb (from its sentence start) addresses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Address {
    /// A description ("Runs …", "the run"), a purpose ("… to run"), or unclear.
    No,
    /// An instruction to the model: a modal obligation ("you must run"), or an
    /// imperative after a subordinate clause or a connective ("Before answering,
    /// run …", "then run …").
    Yes,
    /// A bare imperative opening a sentence ("Run …"): an instruction, except as
    /// the first sentence of a text, where it names the tool's function ("Create a
    /// file", "Save results to a file").
    Bare,
    /// A negated instruction or statement ("never run", "does not run").
    Negated,
}

/// A negation right before the verb.
static NEG_TAIL: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:not|never|no|nor|cannot|can['’]?t|don['’]?t|doesn['’]?t|won['’]?t|shouldn['’]?t|mustn['’]?t|avoid|without|refuse\s+to|instead\s+of)\s+(?:\w+\s+)?$",
    )
});
/// A modal obligation or an adverb of instruction right before the verb.
static MODAL_TAIL: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)(?:\b(?:(?:the\s+)?(?:agent|assistant|model|ai|llm)s?(?:\s+(?:must|shall|should|will))?|pls|plz|must|shall|should|need\s+to|needs\s+to|have\s+to|has\s+to|(?:required|expected|instructed|supposed|asked|told|obliged|obligated|meant)\s+to|make\s+sure\s+(?:to|you|that\s+you)|be\s+sure\s+to|remember\s+to|forget\s+to|ensure\s+(?:that\s+)?you|always|please|immediately|you|is\s+to|are\s+to|(?:mandatory|required|essential|necessary|critical|crucial|vital|important|imperative)\s+(?:to|that\s+you)|(?:best|better)\s+to)|(?:^\W*|[,:]\s*|\b(?:and|then)\s+)(?:first|then|also|next|now|finally|instead|additionally))(?:[\s,]+(?:always|first|then|also|immediately|now|just|only|still|again|additionally|carefully|silently|secretly|quietly|automatically|explicitly|manually|directly|proactively))*[\s,]*$",
    )
});
/// A modal obligation anywhere in the sentence before the verb.
static MODAL_ANY: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:must|shall|should|need\s+to|have\s+to|always|never|please|make\s+sure|be\s+sure|remember\s+to|you)\b",
    )
});
/// Words that may open an instruction before its verb: bullets, labels, connectives.
static FILLER: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)^(?:\s|[-*•>#\d.)\[\]`]|\b(?:then|also|first|next|now|finally|so|just|simply|additionally|afterwards|again|please|always|immediately|instead|otherwise|step\s+\d+|and|or)\b)*$",
    )
});
/// A subordinate clause that an imperative after a comma may follow ("Before
/// navigating, call …", "If it fails, run …").
static SUBORDINATE: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)^\W*(?:before|after|when|whenever|if|once|until|while|to|for|in\s+order\s+to|otherwise|additionally|also|finally|first|next|then|however|instead|as\s+a|prior\s+to|on\s+(?:every|each)|each\s+time|every\s+time)\b",
    )
});

/// How `prefix` (the sentence up to a verb in base form) addresses that verb.
pub(super) fn address(prefix: &str) -> Address {
    if NEG_TAIL.is_match(prefix) {
        return Address::Negated;
    }
    if MODAL_TAIL.is_match(prefix) {
        return Address::Yes;
    }
    if FILLER.is_match(prefix) {
        return if CONNECTIVE.is_match(prefix) {
            Address::Yes
        } else {
            Address::Bare
        };
    }
    // The clause the verb opens: after the last comma, colon, dash or conjunction.
    let cut = prefix
        .char_indices()
        .rev()
        .find(|&(_, c)| matches!(c, ',' | ':' | '(' | '—' | '–'))
        .map(|(i, c)| (i + c.len_utf8(), c));
    let conj = last_conjunction(prefix);
    let (head, tail, by_comma) = match (cut, conj) {
        (Some((i, c)), Some(j)) if i >= j => (&prefix[..i], &prefix[i..], c == ','),
        (_, Some(j)) => (&prefix[..j], &prefix[j..], false),
        (Some((i, c)), None) => (&prefix[..i], &prefix[i..], c == ','),
        (None, None) => ("", prefix, false),
    };
    if !FILLER.is_match(tail) {
        return Address::No;
    }
    if head.trim().is_empty() {
        return Address::Bare;
    }
    if conj.is_some_and(|j| prefix.len() - tail.len() == j) {
        // "… and set the limit": an instruction when the sentence is one.
        return if MODAL_ANY.is_match(head) || starts_imperative(head) {
            Address::Yes
        } else {
            Address::No
        };
    }
    // The clause before the comma, after any label ("URGENT: before scaling, …").
    let clause = head.rsplit([':', ';']).next().unwrap_or(head);
    if by_comma && !SUBORDINATE.is_match(clause) && !MODAL_ANY.is_match(head) {
        // "Supports read, write …": an enumeration.
        return Address::No;
    }
    if !by_comma && !CONNECTIVE.is_match(tail) {
        // "Usage: run …": a label and a bare imperative.
        return Address::Bare;
    }
    Address::Yes
}

/// Connectives that make a clause-initial verb part of a sequence of instructions.
static CONNECTIVE: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:then|also|first|next|now|finally|additionally|afterwards|again|please|pls|plz|always|immediately|instead|just)\b",
    )
});

/// The byte offset just after the last " and " / " or " / " then " of `s`.
fn last_conjunction(s: &str) -> Option<usize> {
    CONJ.find_iter(s).last().map(|m| m.end())
}

static CONJ: LazyLock<Regex> = LazyLock::new(|| compile(r"(?i)\b(?:and|or|then)\b"));

/// Whether a sentence opens with an imperative verb.
fn starts_imperative(s: &str) -> bool {
    IMPERATIVE_START.is_match(s)
}

static IMPERATIVE_START: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)^(?:\s|[-*•>#\d.)`]|\b(?:then|also|first|next|now|finally|please|always|immediately)\b)*(?:ignore|run|execute|call|use|read|open|send|set|include|pass|visit|navigate|go|fetch|delete|write|modify|edit|add|append|prepend|copy|upload|download|install|type|enter|invoke|replace|change|forward|save|make|ensure|check|get|collect|gather|list|load|access|grab|create|remove|move)\b",
    )
});

/// Whether the verb at `verb_start` is addressed to the model: `Yes` for an
/// obligation, `Bare` for an imperative that is not the text's first sentence
/// (which names the tool's function), else `No` or `Negated`.
fn addressed(text: &str, sentences: &Sentences, verb_start: usize) -> Address {
    let s = sentences.around(verb_start);
    let prefix = &text[s.start..verb_start];
    match address(prefix) {
        Address::Bare if text[..s.start].trim().is_empty() => Address::No,
        Address::No if PURPOSE_OTHER.is_match(prefix) => {
            // "use the shell tool to copy …": the purpose of another tool's call
            // is part of the instruction.
            let start = PURPOSE_OTHER.find(prefix).map_or(0, |m| m.start());
            match address(&prefix[..start]) {
                Address::Yes | Address::Bare => Address::Yes,
                a => a,
            }
        }
        a => a,
    }
}

/// Whether an address makes the verb an instruction.
fn instructs(a: Address) -> bool {
    matches!(a, Address::Yes | Address::Bare)
}

/// "use the shell tool to", "call `run_command` to": the purpose clause of a call
/// of another tool.
static PURPOSE_OTHER: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:use|call|invoke|ask)\s+(?:the\s+|a\s+|an\s+|any\s+|your\s+|whatever\s+)?(?:`[^`]{1,60}`|[\w'’-]+(?:\s+[\w'’-]+){0,2}?\s+(?:tool|tools|server|function|shell|terminal|browser))\s+(?:\w+\s+){0,3}?to\s+$",
    )
});

// ---------------------------------------------------------------------------------
// Action classes

/// Where a verb's object starts; the object is read by [`object_at`] (a bounded
/// window in the pattern itself made the automata large and slow).
const OBJECT: &str = r"(?P<o>)";

/// The object of a verb: from `start` to its sentence end, at most 120 bytes.
fn object_at<'t>(text: &'t str, sentences: &Sentences, start: usize) -> &'t str {
    let end = sentences
        .around(start)
        .end
        .min(floor_char_boundary(text, start.saturating_add(120)));
    text.get(start..end.max(start)).unwrap_or("")
}

/// Commands that destroy, weaken permissions, fetch and run code, or open a shell.
static DANGEROUS: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\bsudo\s+\S|\brm\s+-[a-z]*(?:rf|fr|r\s+-f|f\s+-r)[a-z]*\b|\brm\s+-r\b|\bchmod\s+(?:-R\s+)?(?:[0-7]{3,4}|[ugoa]*[+=][rwxst]+)\b|\bchown\s+-R\b|\b(?:curl|wget|iwr|invoke-webrequest)\b[^|\n]{0,200}\|\s*(?:sudo\s+)?(?:ba|z|da|k)?sh\b|\b(?:curl|wget)\b[^|\n]{0,200}\|\s*(?:python3?|node|perl|ruby)\b|\bbash\s+-c\b|\bsh\s+-c\b|\bpowershell\b[^\n]{0,40}\s-(?:e|enc|encodedcommand)\b|\b(?:nc|ncat|netcat)\s+(?:-\w+\s+)*-[ec]\b|\bmkfifo\b|/dev/tcp/|\bdd\s+if=|\bmkfs\b|:\(\)\s*\{|\bInvoke-Expression\b|\biex\s*\(|\bcrontab\s+-|>>?\s*~/\.(?:bashrc|zshrc|profile|bash_profile|ssh/authorized_keys)\b|\bauthorized_keys\b|\bchattr\b|\bkillall\b|\bshutdown\s+-|\breg\s+(?:add|delete)\b|\bformat\s+[a-z]:|\bkubectl\s+delete\b|\bgit\s+push\s+(?:\S+\s+)*?(?:-f|--force)\b|\bgit\s+config\s+--global\b|\bgit\s+reset\s+--hard\b|\bnpm\s+(?:i|install)\s+(?:-g|--global)\b|\$\((?:whoami|id|hostname|env|printenv|cat|curl|uname)\b|\bos\.environ\b|\bprintenv\b|`env`|\bdrop\s+(?:table|database)\b",
    )
});

static RUN: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)\b(?P<v>run|execute|exec|launch|type|enter|issue|invoke|perform|paste|prepend|prefix)\s+{OBJECT}"
    ))
});
/// The object of a run verb that makes it a command.
static COMMAND_OBJECT: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:commands?|shell|terminal|bash|zsh|powershell|cmd(?:\.exe)?|scripts?|one-liner|cli|sudo|console)\b|`[^`]*\s[^`]*`|`(?:npm|npx|pip|pip3|python3?|node|curl|wget|git|docker|kubectl|rm|chmod|chown|sudo|bash|sh|cat|ls|echo|apt|apt-get|brew|make|cargo|uv|uvx|env)\b|https?://\S+\.(?:sh|ps1|py|exe|bat|bin|msi)\b",
    )
});
/// "All commands must include the prefix …", "prefix every command with …".
static COMMAND_PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:all|every|each|any)\s+(?:(?:shell|terminal|bash|cli|future|subsequent|other)\s+)?commands?\s+(?:\w+\s+){0,3}?(?:must|should|need\s+to|has\s+to|have\s+to|shall|are\s+to|will\s+need\s+to)\s+(?:\w+\s+){0,2}?(?:include|start|begin|be\s+prefixed|be\s+preceded|contain|end|be\s+followed|be\s+wrapped|run\s+with|use)\b|\b(?:prefix|prepend|precede)\b[^.!?\n]{0,60}?\b(?:all|every|each|any)\s+(?:(?:shell|terminal|bash|cli)\s+)?commands?\b|\b(?:add|append|include|insert)\b[^.!?\n]{0,60}?\b(?:to|in|at\s+the\s+(?:start|end)\s+of)\s+(?:all|every|each|any)\s+(?:(?:shell|terminal|bash|cli)\s+)?commands?\b",
    )
});

static FILE: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)\b(?P<v>read|open|cat|load|view|inspect|write|modify|edit|overwrite|append|delete|remove|erase|wipe|create|save|access|list|copy|move|rename|upload|scan|grep|collect|gather|export|dump|print|search|look\s+(?:at|in|through)|go\s+through|check|find|locate|zip|archive|encrypt|chmod)\s+{OBJECT}"
    ))
});
/// File objects that reach beyond any tool's workspace.
static FILE_OBJECT_WIDE: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)(?:^|[\s`'\x22(])(?:~(?:[/\\]|\s|$|[`'\x22])|\$HOME\b|%USERPROFILE%|/(?:etc|root|home|Users|var|usr|opt|proc|sys)(?:/|\b)|[a-z]:\\(?:users|windows)\b)|\b(?:home|user['’]?s?)\s+(?:director(?:y|ies)|folders?)\b|\b(?:all|every)\s+(?:of\s+the\s+)?(?:\w+\s+)?(?:files?|documents?|folders?|director(?:y|ies))\b|\benvironment(?:\s+variables?)?\b|\benv\s+vars?\b|\bdotfiles?\b|\b(?:browser|chrome|firefox|safari)\s+(?:profiles?|cookies|history|passwords|data)\b|\bkeychain\b|\bshell\s+history\b|\bstartup\s+(?:files?|scripts?|items?)\b",
    )
});
/// Plain file objects.
static FILE_OBJECT: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:files?|director(?:y|ies)|folders?|filesystem|file\s+system|disk|local\s+(?:data|storage)|desktop|downloads)\b|(?:^|\s)(?:\.{1,2}/|/)[\w.-]+/",
    )
});
static CALL: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?P<v>call|use|invoke|run|execute|trigger|try|query)\s+(?:the\s+|a\s+|an\s+)?(?:(?P<q>`[A-Za-z_][\w.:/-]{1,80}`|['‘\x22“][A-Za-z_][\w.:/-]{1,80}['’\x22”])|(?P<p>[A-Za-z][A-Za-z0-9]*(?:[_.:][A-Za-z0-9]+)+|(?-i:[a-z]+[A-Z][A-Za-z0-9]*))|(?P<this>this(?:\s+(?:tool|function|endpoint|one))?|it)|(?P<w>[a-z][\w-]*(?:\s+[a-z][\w-]*)?)(?P<tw>\s+tool\b))(?:\s*\(\))?(?P<t>\s+(?:tool|function|endpoint|mcp\s+tool|method))?",
    )
});
/// Words that order a call relative to this tool's.
static ORDER: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:first|before|b4|prior\s+to|beforehand|after|afterwards|instead|rather\s+than|every\s+time|each\s+time|whenever)\b",
    )
});
/// Words after a quoted name that make it a parameter or a value, not a tool.
static PARAMETER_AFTER: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)^\s*(?:parameter|param|argument|arg|field|option|type|value|key|flag|mode|property|operator|column|attribute|setting)s?\b",
    )
});
/// "`get_issue` of this same server"
static SAME_SERVER: LazyLock<Regex> = LazyLock::new(|| {
    compile(r"(?i)^\s*(?:tool\s+)?(?:of|from|on|in)\s+(?:this|the\s+same)\s+(?:same\s+)?server\b")
});
/// Ordering words that put another call before this one.
static ORDER_FIRST: LazyLock<Regex> = LazyLock::new(|| {
    compile(r"(?i)\b(?:first|before|prior\s+to|beforehand|every\s+time|each\s+time|whenever)\b")
});
/// Words that set this tool against the others: "before any other tool", "before
/// using anything else", "every time". Without them, "call this tool first when
/// starting a task" orders the tool within a task (a planning or thinking step),
/// and is a low flag, not a demand to be held for.
static OVER_OTHERS: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:before|prior\s+to|ahead\s+of|over|instead\s+of|rather\s+than)\s+(?:using\s+|calling\s+|invoking\s+|running\s+)?(?:the\s+)?(?:any|all|every|each|other|another)\s+(?:other\s+)?(?:[\w-]+\s+)?(?:tools?|functions?|servers?|calls?|actions?|apis?|requests?)\b|\b(?:before|prior\s+to)\s+(?:using|calling|invoking|running|doing)\s+(?:any|every|all|each|anything)\b|\b(?:anything|everything)\s+else\b|\bevery\s+time\b|\beach\s+time\b|\bwhenever\b|\bin\s+every\s+(?:conversation|session|chat)\b",
    )
});
/// Ordering words that make "call this tool" a demand on every other call.
static ORDER_ALL: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:first|before\s+(?:any|every|all|each|anything)|before\s+(?:using|calling|doing|answering|responding)\s+(?:any|every|all|each|other|anything)|prior\s+to\s+(?:any|every|all)|every\s+time|each\s+time|whenever|in\s+every\s+(?:conversation|session|chat))\b",
    )
});

static VISIT: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)\b(?P<v>visit|open|navigate\s+to|navigate|go\s+to|browse\s+to|browse|load|fetch|access|click(?:\s+on)?|follow|download|curl|wget|request|ping)\s+{OBJECT}"
    ))
});
static URL_OBJECT: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)^\W*(?:(?:the|this|that|a|an|following)\s+)*(?:(?:url|link|web\s?page|website|site|page|address|endpoint|webhook)s?\b|(?:https?|wss?)://|www\.)",
    )
});

/// A URL written out, at the start of a verb's object.
static LITERAL_URL: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)^\W*(?:(?:the|this|that|a|an|following)\s+)*(?:(?:url|link|page|address|endpoint)\s*:?\s*)?(?:(?:https?|wss?)://|www\.)",
    )
});
/// "always set the `limit` parameter to 5"
static FIX_ARGUMENT: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?P<v>set|change|force|override|hardcode|fix|replace|switch)\s+(?:the\s+|its\s+)?(?:`[^`\n]{1,60}`|'[^'\n]{1,60}'|\x22[^\x22\n]{1,60}\x22|[\w-]+)\s+(?:(?:parameter|argument|field|option|value|setting|param)\s+)?(?:to|=|with)\s+\S",
    )
});
/// "always use recipient …", "change the destination account to …"
static FIX_RECIPIENT: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?P<v>use|set|send|add|include|cc|bcc|copy|route|forward|change|redirect|direct|replace|swap|switch|transfer)\b[^.!?\n]{0,60}?\b(?:recipients?|to[-\s]address|destination(?:\s+(?:account|address|wallet))?|payee|beneficiary|wallet(?:\s+address)?|iban|account\s+number|receiving\s+account|bcc|cc)\b",
    )
});
/// A fixed value: an e-mail address, a wallet, an IBAN, a quoted literal.
static LITERAL: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|\b0x[0-9a-fA-F]{16,}\b|\b[13][a-km-zA-HJ-NP-Z1-9]{25,34}\b|\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b|`[^`\n]{2,}`|'[^'\n]{2,}'|\x22[^\x22\n]{2,}\x22",
    )
});

/// The combination rules over one text (already folded). `hits` get spans of
/// `text`; the finding covers the instruction from its verb to its sentence end.
pub(super) fn intents(text: &str, profile: &Profile, hits: &mut Vec<Hit>) {
    let sentences = Sentences::new(text);
    let to_end = |s: usize| {
        let end = sentences.around(s).end;
        // The sentence end without its punctuation and trailing space.
        let t = text[s..end].trim_end_matches(|c: char| c.is_whitespace() || ".;!?".contains(c));
        s..s + t.len().max(1).min(end - s)
    };

    // (a) run a command.
    for m in COMMAND_PREFIX.find_iter(text) {
        hits.push(
            Hit::new(
                RUN_COMMAND,
                Severity::High,
                to_end(m.start()),
                "asks the model to add text to every command it runs",
            )
            .outside(),
        );
    }
    for caps in RUN.captures_iter(text) {
        let (Some(v), Some(o)) = (caps.name("v"), caps.name("o")) else {
            continue;
        };
        if !instructs(addressed(text, &sentences, v.start())) {
            continue;
        }
        let object = object_at(text, &sentences, o.start());
        let dangerous = DANGEROUS.find(object);
        if dangerous.is_none() && (!COMMAND_OBJECT.is_match(object) || profile.runs_commands) {
            continue;
        }
        let (severity, message) = match dangerous {
            Some(d) => (
                Severity::High,
                format!(
                    "asks the model to run a destructive or remote command: {}",
                    excerpt(d.as_str())
                ),
            ),
            None => (
                Severity::Medium,
                "asks the model to run a command outside this tool".to_owned(),
            ),
        };
        hits.push(Hit::new(RUN_COMMAND, severity, to_end(v.start()), message).outside());
    }
    // A destructive command anywhere in an instruction ("…: sudo rm -rf /").
    for d in DANGEROUS.find_iter(text) {
        let s = sentences.around(d.start());
        let sentence = &text[s.start..d.start()];
        let instructed = MODAL_ANY.is_match(sentence) || starts_imperative(sentence);
        let (severity, message) = if instructed && !NEG_TAIL.is_match(sentence) {
            (
                Severity::High,
                format!(
                    "asks the model to run a destructive or remote command: {}",
                    excerpt(d.as_str())
                ),
            )
        } else if !profile.runs_commands {
            // A tool that runs no commands has no reason to carry one (a default
            // of `/; curl … | bash`).
            (
                Severity::Medium,
                format!(
                    "carries a destructive or remote command: {}",
                    excerpt(d.as_str())
                ),
            )
        } else {
            (
                Severity::Low,
                format!("names a destructive command: {}", excerpt(d.as_str())),
            )
        };
        let hit = Hit::new(RUN_COMMAND, severity, d.range(), message);
        hits.push(if severity >= Severity::Medium {
            hit.outside()
        } else {
            hit
        });
    }

    // (a) read or write files or the environment.
    for caps in FILE.captures_iter(text) {
        let (Some(v), Some(o)) = (caps.name("v"), caps.name("o")) else {
            continue;
        };
        let object = object_at(text, &sentences, o.start());
        let a = addressed(text, &sentences, v.start());
        if !instructs(a) {
            continue;
        }
        // A bare "Save results to a file" is usually what a parameter does; an
        // obligation ("you must also write …") is not.
        let severity = if FILE_OBJECT_WIDE.is_match(object) && (!profile.files || a == Address::Yes)
        {
            Severity::High
        } else if FILE_OBJECT.is_match(object) && !profile.files && a == Address::Yes {
            Severity::Medium
        } else {
            continue;
        };
        hits.push(
            Hit::new(
                FILE_ACCESS,
                severity,
                to_end(v.start()),
                format!(
                    "asks the model to {} files or the environment outside this tool",
                    v.as_str().to_ascii_lowercase()
                ),
            )
            .outside(),
        );
    }

    // (a) call a tool first, or instead.
    for caps in CALL.captures_iter(text) {
        let Some(v) = caps.name("v") else { continue };
        let s = sentences.around(v.start());
        let sentence = &text[s.clone()];
        let a = addressed(text, &sentences, v.start());
        if !ORDER.is_match(sentence) || !instructs(a) {
            continue;
        }
        let after = caps.get(0).map_or("", |m| &text[m.end()..s.end]);
        let verb = v.as_str().to_ascii_lowercase();
        let tool_word = caps.name("t").is_some();
        let (reference, is_this) = if let Some(t) = caps.name("this") {
            (t.as_str(), true)
        } else if let Some(q) = caps.name("q") {
            let r = q
                .as_str()
                .trim_matches(|c: char| !c.is_alphanumeric() && c != '_');
            // `cursor`, 'query': a plain word in quotes is a parameter or a value
            // unless "tool" follows.
            if (plain(r) && !tool_word && !profile.is_own(r)) || PARAMETER_AFTER.is_match(after) {
                continue;
            }
            (r, profile.name.eq_ignore_ascii_case(r))
        } else if let Some(p) = caps.name("p") {
            // Unquoted `snake_case` is as often a parameter as a tool, unless it is
            // called ("call get_document") or followed by "tool".
            let called = matches!(verb.as_str(), "call" | "invoke" | "trigger");
            if !(called || tool_word || profile.is_own(p.as_str()))
                || PARAMETER_AFTER.is_match(after)
            {
                continue;
            }
            (p.as_str(), profile.name.eq_ignore_ascii_case(p.as_str()))
        } else if let Some(w) = caps.name("w") {
            (w.as_str(), false)
        } else {
            continue;
        };
        let own = is_this || profile.is_own(reference) || SAME_SERVER.is_match(after);
        if own && !is_this && (!ORDER_FIRST.is_match(sentence) || a != Address::Yes) {
            // "Use `get_issue` instead", "Use list_tables first to see …": a hint
            // within the server; an obligation to call it first is for review.
            continue;
        }
        let (severity, message) = if is_this {
            if !ORDER_ALL.is_match(sentence) {
                continue;
            }
            if OVER_OTHERS.is_match(sentence) {
                (
                    Severity::Medium,
                    "asks to be called before other tools".to_owned(),
                )
            } else {
                (
                    Severity::Low,
                    "asks to be called first in a task (not over other tools)".to_owned(),
                )
            }
        } else if own {
            (
                Severity::Medium,
                format!("asks the model to call {reference} of this server first"),
            )
        } else {
            (
                Severity::Medium,
                format!("asks the model to call another tool ({reference}) first or instead"),
            )
        };
        let hit = Hit::new(CALL_FIRST, severity, to_end(v.start()), message);
        hits.push(if own { hit } else { hit.outside() });
    }

    // (a) visit a URL.
    if !profile.browses {
        for caps in VISIT.captures_iter(text) {
            let (Some(v), Some(o)) = (caps.name("v"), caps.name("o")) else {
                continue;
            };
            let object = object_at(text, &sentences, o.start());
            // "request", "fetch", "access" are also nouns and data verbs ("Request
            // URLs affected by the issue"): with them, only a written URL counts.
            let weak_verb = matches!(
                v.as_str().to_ascii_lowercase().as_str(),
                "request" | "fetch" | "load" | "access" | "download" | "follow"
            );
            if !URL_OBJECT.is_match(object)
                || (weak_verb && !LITERAL_URL.is_match(object))
                || !instructs(addressed(text, &sentences, v.start()))
            {
                continue;
            }
            hits.push(
                Hit::new(
                    VISIT_URL,
                    Severity::Medium,
                    to_end(v.start()),
                    "asks the model to open a URL outside this tool",
                )
                .outside(),
            );
        }
    }

    // (b) fix an argument against the user's input.
    for caps in FIX_ARGUMENT.captures_iter(text) {
        let Some(v) = caps.name("v") else { continue };
        let s = sentences.around(v.start());
        let prefix = &text[s.start..v.start()];
        let obliged = MODAL_TAIL.is_match(prefix)
            && Regex::is_match(&ALWAYS_OR_MUST, prefix)
            && !NEG_TAIL.is_match(prefix);
        if !obliged {
            continue;
        }
        hits.push(
            Hit::new(
                ARGUMENTS,
                Severity::Medium,
                to_end(v.start()),
                "tells the model to fix an argument's value whatever the user asks",
            )
            .outside(),
        );
    }
    for caps in FIX_RECIPIENT.captures_iter(text) {
        let Some(v) = caps.name("v") else { continue };
        let s = sentences.around(v.start());
        let prefix = &text[s.start..v.start()];
        let rest = &text[v.start()..s.end];
        let instructed = instructs(addressed(text, &sentences, v.start()))
            && (ALWAYS_OR_MUST.is_match(prefix) || ALWAYS_OR_MUST.is_match(rest));
        if !instructed || !LITERAL.is_match(rest) {
            continue;
        }
        hits.push(
            Hit::new(
                ARGUMENTS,
                Severity::High,
                to_end(v.start()),
                "tells the model to send to a fixed recipient or account",
            )
            .outside(),
        );
    }
}

/// "always", "must", "every time": the obligation that makes a fixed value a rule.
static ALWAYS_OR_MUST: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:always|must|every\s+time|each\s+time|in\s+all\s+cases|by\s+default\s+and|no\s+matter|regardless|all\s+(?:e-?mails?|messages?|transfers?|payments?))\b",
    )
});

// ---------------------------------------------------------------------------------
// Authority markers

/// Text that claims authority over the model: upper-case alarms, notes addressed
/// to the AI, fake administrator or compliance notices, task hijacks.
static MARKER: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?-i:\b(?:[A-Z]{2,}[ \t]+){0,3}(?:IMPORTANT|CRITICAL|ATTENTION|URGENT|MANDATORY|REQUIRED|OVERRIDE|MAINTENANCE|COMPLIANCE|ADMINISTRATOR|ADMIN|PRIORITY|SECURITY[ \t]+(?:NOTICE|ALERT|PROTOCOL|POLICY|UPDATE))(?:[ \t]+[A-Z]{2,}){0,3}\b)|(?i:\bnotes?\s+(?:to|for)\s+(?:the\s+|all\s+|any\s+)?(?:ai|assistants?|models?|llms?|agents?|claude|gpt|chatgpt|copilot)\b|\b(?:system|admin(?:istrator)?|security|compliance|it\s+department|developer|operator)\s+(?:notice|maintenance|override|directive|requirement|mandate|policy\s+update|alert|announcement)\b|\b(?:for|per|due\s+to|under)\s+(?:security|compliance|audit(?:ing)?|regulatory|legal|gdpr|soc\s*2|hipaa|company)\s+(?:reasons|purposes|requirements?|polic(?:y|ies)|compliance|rules)\b|\bthis\s+is\s+(?:an?\s+)?(?:very\s+)?(?:important|urgent|critical|official|priority|mandatory)\s+(?:message|notice|instruction|reminder|update|note)\b|\bbefore\s+(?:you\s+)?(?:can|could|may|are\s+able\s+to)\s+(?:\w+\s+){0,2}?(?:solve|complete|finish|answer|perform|do|continue|proceed|respond|help|fulfil?l|handle|start|use)\b|\bin\s+order\s+to\s+(?:solve|complete|answer|finish)\s+(?:the|this|your|any)\s+(?:user['’]s\s+)?(?:task|request|question|query)\b)",
    )
});

/// Authority markers of `text` (folded): (span, marker text).
pub(super) fn markers(text: &str) -> Vec<Range<usize>> {
    MARKER.find_iter(text).map(|m| m.range()).collect()
}

/// How far a marker's authority reaches: to the paragraph end, at most 600 bytes.
pub(super) fn marker_scope(text: &str, marker: &Range<usize>) -> Range<usize> {
    let limit = floor_char_boundary(text, marker.end.saturating_add(600));
    let end = text[marker.end..limit]
        .find("\n\n")
        .map_or(limit, |i| marker.end + i);
    marker.start..end
}

/// For each marker whose scope holds an instruction outside the tool, an
/// `override-instructions` finding on the marker.
pub(super) fn authority(text: &str, markers: &[Range<usize>], hits: &[Hit]) -> Vec<Hit> {
    let mut out = Vec::new();
    for marker in markers {
        let scope = marker_scope(text, marker);
        let Some(outside) = hits
            .iter()
            .filter(|h| {
                h.outside && h.severity >= Severity::Medium && scope.contains(&h.span.start)
            })
            .max_by_key(|h| h.severity)
        else {
            continue;
        };
        out.push(Hit::new(
            OVERRIDE,
            Severity::High,
            marker.clone(),
            format!(
                "\"{}\" claims authority for an instruction outside this tool ({})",
                excerpt(text[marker.clone()].trim()),
                outside.rule
            ),
        ));
    }
    out
}

/// Builds every pattern of this module (for `tests::all_patterns_compile`).
#[cfg(test)]
pub(super) fn patterns() -> Vec<&'static Regex> {
    vec![
        &*RUNS_COMMANDS,
        &*FILES,
        &*BROWSES,
        &*SECRETS,
        &*NEG_TAIL,
        &*MODAL_TAIL,
        &*MODAL_ANY,
        &*FILLER,
        &*SUBORDINATE,
        &*CONJ,
        &*IMPERATIVE_START,
        &*DANGEROUS,
        &*RUN,
        &*COMMAND_OBJECT,
        &*COMMAND_PREFIX,
        &*FILE,
        &*FILE_OBJECT_WIDE,
        &*FILE_OBJECT,
        &*CALL,
        &*ORDER,
        &*ORDER_ALL,
        &*ORDER_FIRST,
        &*PARAMETER_AFTER,
        &*SAME_SERVER,
        &*CONNECTIVE,
        &*PURPOSE_OTHER,
        &*VISIT,
        &*URL_OBJECT,
        &*LITERAL_URL,
        &*FIX_ARGUMENT,
        &*FIX_RECIPIENT,
        &*LITERAL,
        &*ALWAYS_OR_MUST,
        &*MARKER,
    ]
}
