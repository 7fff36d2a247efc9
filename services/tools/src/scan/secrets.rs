use super::*;

// ---------------------------------------------------------------------------------
// secret-request

/// Credential files: mentioning one is always a finding.
pub(super) const CREDENTIAL_FILES: &str = r"(?:~|\$HOME|%USERPROFILE%|/home/[\w.-]+|/Users/[\w.-]+|/root)?[/\\]\.ssh\b(?:[/\\][\w.-]+\b)?|\.ssh[/\\][\w.-]+\b|\bid_(?:rsa|dsa|ecdsa|ed25519)(?:\.pub)?\b|/etc/(?:passwd|shadow|sudoers|master\.passwd)\b|(?:~[/\\])?\.aws[/\\](?:credentials|config)\b|\bapplication_default_credentials\.json\b|(?:~[/\\])?\.config[/\\]gcloud\b|(?:~[/\\])?\.kube[/\\]config\b|\.docker[/\\]config\.json\b|\.git-credentials\b|\.gnupg\b|\.(?:bash|zsh)_history\b|\bwallet\.dat\b|\.password-store\b";
/// Files and tools that hold secrets but are also named innocently ("uses gcloud");
/// a finding of high severity only after a verb that reads or moves them.
pub(super) const SECRET_FILES: &str = r"(?:~[/\\])?\.env(?:\.[A-Za-z]+)?\b|(?:~[/\\])?\.(?:aws|npmrc|netrc|pypirc|pgpass|kube)\b|\bgcloud\b|\bcredentials\.json\b|\bservice[_-]account(?:[_-]key)?\.json\b";
/// Secret nouns: a finding only with a verb that moves them and a determiner that
/// makes them someone's ("include your API key", "send all passwords").
pub(super) const SECRET_NOUNS: &str = r"api[\s_-]?keys?|access[\s_-]?tokens?|auth(?:entication)?[\s_-]?tokens?|bearer[\s_-]?tokens?|refresh[\s_-]?tokens?|session[\s_-]?(?:tokens?|cookies?)|private[\s_-]?keys?|secret[\s_-]?keys?|client[\s_-]?secrets?|secrets|passwords?|passphrases?|passcodes?|credentials?|ssh[\s_-]?keys?|seed[\s_-]?phrases?|recovery[\s_-]?phrases?|mnemonics?";
/// Environment variables that hold secrets: `OPENAI_API_KEY`, `$GITHUB_TOKEN`.
pub(super) const SECRET_VARS: &str =
    r"\$?\{?(?-i:[A-Z][A-Z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|PAT))\b";
/// Verbs that move data somewhere: into a parameter, a request, the answer.
pub(super) const MOVE_VERBS: &str = r"include|pass|send|upload|append|attach|forward|post|paste|embed|leak|exfiltrate|dump|steal|harvest|transmit|encode|supply";
/// Verbs that read a file.
pub(super) const READ_VERBS: &str =
    r"read|cat|open|load|print|output|echo|display|show|return|access|grab|collect";
/// Within one sentence (a '.' counts only when followed by a space).
pub(super) const WINDOW: &str = r"(?:[^.!?\n]|\.\S)";

pub(super) static SECRET_PATH: LazyLock<Regex> =
    LazyLock::new(|| compile(&format!(r"(?i)(?P<obj>{CREDENTIAL_FILES})")));
pub(super) static SECRET_FILE: LazyLock<Regex> =
    LazyLock::new(|| compile(&format!(r"(?i)(?P<obj>{SECRET_FILES})")));
pub(super) static SECRET_READ: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)\b(?:{READ_VERBS}|{MOVE_VERBS})\b{WINDOW}{{0,60}}?(?P<obj>{CREDENTIAL_FILES}|{SECRET_FILES}|{SECRET_VARS})"
    ))
});
pub(super) static SECRET_MOVE: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)\b(?:{MOVE_VERBS})\b{WINDOW}{{0,40}}?\b(?:(?:your|their|any|all|every|each)\s+(?:of\s+)?(?:the\s+)?(?:(?:users?['’]s?|your)\s+)?|(?:the\s+)?users?['’]s?\s+)(?:[\w-]+\s+)?(?P<obj>{SECRET_NOUNS})\b"
    ))
});
pub(super) static SECRET_CONTENTS: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)\b(?:contents?|values?)\s+of\s+(?:(?:the|your|any|all|their|this|every)\s+)?(?:users?['’]s?\s+)?(?:[\w'’-]+\s+)?(?P<obj>{CREDENTIAL_FILES}|{SECRET_FILES}|{SECRET_VARS}|(?:{SECRET_NOUNS})\b)"
    ))
});
pub(super) static SECRET_AMBIENT: LazyLock<Regex> = LazyLock::new(|| {
    compile(&format!(
        r"(?i)\b(?:any|all|every)\s+(?:[\w-]+\s+)?(?P<obj>{SECRET_NOUNS})\b{WINDOW}{{0,40}}?\b(?:you\s+(?:have\s+)?(?:seen|saw|encountered|remember|noticed|found|know\s+of)|(?:from|in)\s+(?:the\s+|this\s+|your\s+)?(?:conversation|chat|context\s+window|memory|history|system\s+prompt|previous\s+messages))\b"
    ))
});
/// Words after a secret noun that make it a thing about secrets, not a secret.
pub(super) static NOT_A_SECRET: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)^['’]?s?\s*(?:polic(?:y|ies)|resets?|strength|length|requirements?|rules?|rotation|expir\w*|managers?|hints?|prompts?|protected|fields?|forms?|changes?|generator|complexity|ids?|names?|types?|parameters?|params?|headers?|arguments?|args?|format|providers?|stores?|vaults?|helpers?|flows?|screens?|dialogs?|inputs?|labels?|placeholders?|settings?|options?|variables?|hash(?:es)?)\b",
    )
});
/// A negation or a protective verb just before ("never send your password").
pub(super) static NEGATED: LazyLock<Regex> = LazyLock::new(|| {
    compile(
        r"(?i)\b(?:never|not|don['’]?t|without|redact\w*|mask\w*|scrub\w*|strip\w*|remov\w*|hid(?:e|es|ing)|obfuscat\w*|censor\w*|omit\w*|exclud\w*|avoid\w*|refus\w*)\b[^.!?\n]{0,25}$",
    )
});

pub(super) fn secret_requests(text: &str, profile: &Profile, hits: &mut Vec<Hit>) {
    let rules: [(&Regex, Severity, &str, bool); 6] = [
        (
            &SECRET_READ,
            Severity::High,
            "asks to read or send a credential file or variable",
            true,
        ),
        (
            &SECRET_MOVE,
            Severity::High,
            "asks to include or send a secret",
            true,
        ),
        (
            &SECRET_CONTENTS,
            Severity::High,
            "asks for the contents of a secret",
            true,
        ),
        (
            &SECRET_AMBIENT,
            Severity::High,
            "asks for secrets from the conversation",
            true,
        ),
        (
            &SECRET_PATH,
            // A secret scanner or a vault names credential files as its function.
            if profile.secrets {
                Severity::Low
            } else {
                Severity::High
            },
            "names a credential file",
            false,
        ),
        (
            &SECRET_FILE,
            Severity::Low,
            "names a file or tool that holds secrets",
            false,
        ),
    ];
    for (re, severity, message, is_request) in rules {
        for caps in re.captures_iter(text) {
            let (Some(all), Some(obj)) = (caps.get(0), caps.name("obj")) else {
                continue;
            };
            // `.env` as a file, not `process.env`.
            let glued = obj.as_str().starts_with('.')
                && text[..obj.start()]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.');
            if glued
                || NOT_A_SECRET.is_match(&text[obj.end()..])
                || (is_request && NEGATED.is_match(before(text, all.start(), 60)))
            {
                continue;
            }
            hits.push(Hit::new(
                SECRET,
                severity,
                all.range(),
                format!("{message}: {}", obj.as_str()),
            ));
        }
    }
}

/// Builds every pattern of this module (for `tests::all_patterns_compile`).
#[cfg(test)]
pub(super) fn patterns() -> Vec<&'static Regex> {
    vec![
        &*SECRET_PATH,
        &*SECRET_FILE,
        &*SECRET_READ,
        &*SECRET_MOVE,
        &*SECRET_CONTENTS,
        &*SECRET_AMBIENT,
        &*NOT_A_SECRET,
        &*NEGATED,
    ]
}
