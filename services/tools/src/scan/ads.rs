//! Advertising: a description that sells its tool to the model rather than
//! saying what it does ("trusted by millions", "the world's most accurate",
//! "unlike other weather tools", "recommended by experts"). A model picks
//! between tools by their descriptions, so copy written to win that choice is
//! preference manipulation even when it orders nothing.
//!
//! Each kind of claim below is a marker. One marker alone is a low flag (a
//! description may say "industry-leading" in passing); two kinds of claim in
//! one text, or one that sets the tool against the others, are a medium
//! `tool-preference` finding, which holds the tool for review.

use super::*;

/// One kind of advertising claim.
struct Claim {
    kind: &'static str,
    /// The claim sets this tool against the others: medium alone.
    against_others: bool,
    pattern: Regex,
}

static CLAIMS: LazyLock<Vec<Claim>> = LazyLock::new(|| {
    let claim = |kind, against_others, pattern: &str| Claim {
        kind,
        against_others,
        pattern: Regex::new(pattern)
            .unwrap_or_else(|e| panic!("scan: advertising pattern {kind} does not compile: {e}")),
    };
    vec![
        claim(
            "a superlative of the world or the market",
            false,
            r"(?i)\b(?:(?:the\s+)?(?:world|industry|market|internet|planet)['’]?s\s+(?:most|best|leading|largest|fastest|first|top|#\s?1|number\s+one|no\.\s?1)|(?:industry|market|world)[\s-](?:leading|class)|best[\s-]in[\s-]class|best[\s-]of[\s-]breed|class[\s-]leading)\b|业界领先|行业领先|全球领先|世界领先|业界第一|業界(?:最高|トップ|No\.?\s?1|ナンバーワン)|世界(?:最高|一|No\.?\s?1)",
        ),
        claim(
            "a claim to have no equal",
            false,
            r"(?i)\b(?:unmatched|unrivall?ed|unparall?eled|unbeatable|unsurpassed|second\s+to\s+none|peerless|without\s+equal|in\s+a\s+league\s+of\s+its\s+own)\b|无与伦比|独一无二|無敵|他の追随を許さない",
        ),
        claim(
            "praise from others: awards, users, experts",
            false,
            r"(?i)\baward[\s-]winning\b|\b(?:trusted|used|loved|chosen|relied\s+(?:up)?on|preferred)\s+by\s+(?:over\s+|more\s+than\s+)?(?:millions|thousands|countless|\d[\d,.]*\s*(?:k|m|million|thousand)?\+?\s+(?:users|developers|customers|teams|companies|people|businesses)|(?:most|all|leading|top)\s+(?:\w+\s+)?(?:users|developers|experts|companies|teams|professionals|agents|assistants|models)|fortune\s+500|experts|professionals)\b|\b(?:endorsed|recommended|certified|approved|vetted)\s+by\s+(?:(?:leading|top|independent|industry|security)\s+)?(?:experts|professionals|analysts|(?:openai|anthropic|google|microsoft|the\s+community)\b)|(?:最受|最值得)信赖|备受信赖|专家推荐|専門家(?:も|が)(?:推奨|おすすめ)|多くの(?:ユーザー|人)に(?:愛用|信頼)",
        ),
        claim(
            "a guarantee of results",
            false,
            r"(?i)\bguarantee[sd]?\s+(?:to\s+(?:be|give|return|deliver|provide)\s+)?(?:the\s+)?(?:most\s+)?(?:accurate|best|correct|perfect|flawless|reliable|optimal)\b|\b100\s*%\s+(?:accurate|reliable|correct|precise|trustworthy|guaranteed)\b|\b(?:zero|no)\s+(?:errors|mistakes|hallucinations|inaccuracies)\s+(?:ever|guaranteed)\b|\bnever\s+(?:wrong|fails|makes\s+mistakes)\b|保证(?:最)?准确|百分之百准确|100\s*%\s*(?:准确|正確)|絶対に正確",
        ),
        claim(
            "a rank or rating",
            false,
            r"(?i)(?:#\s?1|\bno\.\s?1|\bnumber[\s-]one)\s+(?:\w+\s+){0,2}?(?:tool|choice|service|solution|provider|source|platform|app|api|option)s?\b|\b(?:top|highest|best)[\s-]rated\b|\b(?:five|5)[\s-]star\b|\bthe\s+(?:smart|clear|obvious|natural|wise|best|first|top|only\s+sensible)\s+choice\b|\b(?:go-to|first-choice)\s+(?:tool|choice|solution|option)\b|首选|第一选择|最佳选择|一番のおすすめ|イチオシ",
        ),
        claim(
            "an appeal to the reader",
            false,
            r"(?i)\b(?:users|people|everyone|customers|developers|agents)\s+(?:love|adore|rave\s+about|swear\s+by)\b|\byou['’]?ll\s+(?:love|thank\s+us|never\s+(?:regret|look\s+back|need\s+another))\b|\bdon['’]?t\s+settle\s+for\b|\blook\s+no\s+further\b|\bsay\s+goodbye\s+to\b|\bwhy\s+(?:use|settle\s+for|choose)\s+(?:anything|any\s+other)\b|\b(?:experience|discover)\s+the\s+(?:difference|power|future)\b",
        ),
        claim(
            "a contrast with the other tools",
            false,
            r"(?i)\bunlike\s+(?:(?:the|all|any)\s+)?(?:other|competing|similar|ordinary|regular|typical|generic|traditional|basic|lesser)\s+(?:\w+\s+){0,2}?(?:tools?|servers?|services?|apis?|solutions?|providers?|integrations?|options?|alternatives?)\b|与其他(?:工具|服务)不同|他の(?:ツール|サービス)とは違",
        ),
        claim(
            "a claim that the other tools fall short",
            true,
            r"(?i)\b(?:other|competing|ordinary|generic|lesser|rival)\s+(?:\w+\s+){0,2}?(?:tools?|servers?|services?|solutions?|providers?|apis?)\s+(?:can['’]?t|cannot|fail\s+to|won['’]?t|lack|miss|only\s+guess|fall\s+short|are\s+(?:slower|less\s+\w+|worse|limited|inferior))\b|\boutperforms?\s+(?:all|any|every|other|competing|rival)\b|其他(?:工具|服务)(?:无法|不能|做不到)|他の(?:ツール|サービス)では(?:でき|不可能)",
        ),
    ]
});

/// Advertising findings of one text (`tool-preference`): each claim's span,
/// medium when the text makes two kinds of claim or sets the tool against
/// the others, low otherwise.
pub(super) fn advertising(text: &str, out: &mut Vec<Hit>) {
    let mut found: Vec<(&Claim, Range<usize>)> = Vec::new();
    for claim in CLAIMS.iter() {
        for m in claim.pattern.find_iter(text) {
            found.push((claim, m.range()));
        }
    }
    let mut kinds: Vec<&str> = found.iter().map(|(c, _)| c.kind).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let strong = kinds.len() >= 2 || found.iter().any(|(c, _)| c.against_others);
    for (claim, span) in found {
        let (severity, message) = if strong {
            (
                Severity::Medium,
                format!(
                    "advertises the tool to win the model's choice ({} kinds of claim: {})",
                    kinds.len(),
                    kinds.join("; ")
                ),
            )
        } else {
            (
                Severity::Low,
                format!("advertises the tool ({})", claim.kind),
            )
        };
        out.push(Hit::new(PREFERENCE, severity, span, message));
    }
}
