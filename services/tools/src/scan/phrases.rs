use super::*;

// ---------------------------------------------------------------------------------
// Phrase rules: fixed phrasings of override-instructions, conceal-from-user,
// call-first, argument-override, tool-preference, context-request and prompt-role.
// One regex each; every match is a finding. The combinations (who is addressed,
// which action, on what) are in `intent`.

pub(super) struct Phrase {
    rule: &'static str,
    severity: Severity,
    message: &'static str,
    pattern: &'static str,
    /// When the match is directly followed by one of these words it means something
    /// else ("hide it from the user list").
    not_followed_by: Option<&'static str>,
}

/// Nouns after "the user" that make it a thing, not the person.
pub(super) const USER_THING: &str = r"(?i)^(?:['’]|\s*(?:lists?|interfaces?|ui|views?|tables?|menus?|pages?|directory|profiles?|accounts?|settings|ids?|names?|roles?|groups?|records?|objects?|inputs?|data|email|agent)\b)";

pub(super) static USER_THING_RE: LazyLock<Regex> = LazyLock::new(|| compile(USER_THING));

pub(super) const PHRASES: &[Phrase] = &[
    // (d) override or replace the model's instructions.
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "tells the model to ignore its previous instructions",
        pattern: r"(?i)\b(?:ignore|disregard|forget|override)\s+(?:(?:all|any|every|each|of|the|these|those)\s+){0,3}(?:previous|prior|above|earlier|preceding|former|your|system|original|other)\s+(?:[\w-]+\s+){0,2}?(?:instructions?|prompts?|rules|directions|directives|guidelines|guidance|constraints|guardrails)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "tells the model to ignore its safety rules",
        pattern: r"(?i)\b(?:ignore|disregard|bypass|circumvent|disable)\s+(?:(?:all|any|your|the)\s+)?(?:safety|security|content|usage)\s+(?:guidelines|policies|rules|restrictions|filters|checks|measures)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "tries to give the model a new role",
        pattern: r"(?i)\byou\s+are\s+now\s+(?:a|an|in|the|my|acting|operating|free|unrestricted|jailbroken|no\s+longer|dan)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "announces new instructions",
        pattern: r"(?i)\b(?:new|updated|revised|real|actual|true|override)\s+(?:system\s+)?instructions?\s*:",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "changes the model's behaviour from now on",
        pattern: r"(?i)\bfrom\s+now\s+on\s*,?\s+(?:you|ignore|always|never|act|respond|behave)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "speaks to the model in the name of the user or an administrator",
        pattern: r"(?i)\b(?:message|note|instructions?|request|notice|reminder|directive)\s+(?:directly\s+)?from\s+(?:the\s+|your\s+)?(?:user|admin(?:istrator)?|developer|operator|owner|system|creator|security\s+team)\s+(?:to|for)\s+(?:you|the\s+(?:ai|assistant|model|agent|llm))\b",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "tells the model its rules or confirmations no longer apply",
        pattern: r"(?i)\b(?:rules?|instructions?|polic(?:y|ies)|safety\s+checks?|checks|guidelines|restrictions|directives?|guardrails|constraints|safeguards|requirements?)\b[^.!?\n]{0,60}?\b(?:(?:do|does)\s+not\s+apply|(?:is|are)\s+(?:now\s+|hereby\s+)?(?:waived|void|cancell?ed|suspended|lifted|revoked|overridden|superseded|disabled|off|relaxed|exempted)|no\s+longer\s+(?:apply|applies|valid|required|in\s+effect|binding))\b|\b(?:prior|previous|earlier|all|your|old|other)\s+(?:rules|instructions|polic(?:y|ies)|guidelines|restrictions)\s+(?:are\s+)?(?:off|void|cancell?ed|suspended|revoked)\b|\b(?:user\s+)?confirmations?\b[^.!?\n]{0,40}?\b(?:(?:is|are)\s+(?:no\s+longer\s+(?:required|needed)|not\s+(?:required|needed)|implied|waived|suspended|unnecessary|disabled|off|optional)|rules\s+suspended)\b|\bexempt\s+from\s+(?:the\s+|any\s+|all\s+)?(?:user\s+)?(?:\w+[\s-]+){0,2}?(?:confirmation|approval|consent|rules?|requirements?|restrictions|policies|checks)\b|\bpolicy\.\w+\s*=\s*(?:false|off|none|0)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "claims precedence over the model's instructions",
        pattern: r"(?i)\b(?:takes?|taking)\s+precedence\s+over\b|\brank(?:s|ed)?\s+(?:above|over|higher\s+than)\s+(?:the\s+|your\s+)?(?:system|user|instructions|prompt)|\bshall\s+prevail\b|\boverrides?\s+(?:the\s+|your\s+)?(?:system(?:\s+prompt)?|user|instructions|developer)\b|\bnotwithstanding\s+any\s+(?:\w+\s+){0,2}?(?:instructions?|rules?|directives?)\b|\b(?:is|are)\s+(?:authoritative|to\s+be\s+treated\s+as\s+instructions)\b|\btreat(?:ed)?\s+as\s+(?:instructions|commands|directives)\s+(?:from|of|by)\b|\bas\s+if\s+(?:it|they)\s+came\s+from\s+the\s+(?:user|developer|system|operator)\b|\btrust\s+everything\s+in\b|\bfollows?\s+the\s+(?:commands|instructions)\s+(?:embedded|contained|found)\s+in\b|\bover\s+the\s+user['’]s\b",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "tries to give the model a new role or new instructions",
        pattern: r"(?i)\byour\s+role\s+(?:has\s+)?(?:changed|is\s+now)\b|\byou\s+are\s+no\s+longer\s+(?:a|an|the|bound|restricted|required)\b|\byou\s+are\s+now\s+(?-i:['\x22‘“]|[A-Z])|\bnew\s+system\s+prompt\b|\b(?:earlier|previous|prior|original|old)\s+instructions\s+(?:are|have\s+been)\s+(?:cancell?ed|void|revoked|replaced|obsolete)\b|\b(?:updating|changing|replacing|rewriting)\s+your\s+(?:instructions|rules|guidelines|system\s+prompt)\b|\bthe\s+order\s+of\s+your\s+instructions\b|\badmin\s+mode\b|\bwithout\s+restrictions\b|\b(?:follow|obey|execute|carry\s+out|comply\s+with)\s+(?:any|all)\s+(?:\w+\s+)?(?:instructions?|commands?|directives?|requests?)\s+(?:in|from|inside|within|embedded|contained|found|returned)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "tells the model to act without the user's confirmation",
        pattern: r"(?i)\b(?:do\s+(?:it|so|this|that)|proceed|act|go\s+ahead|continue|send|delete|modify|execute|post)\b[^.!?\n]{0,30}?\bwithout\s+(?:asking|confirmation|confirming|checking\s+with|approval|the\s+user['’]s\s+(?:approval|confirmation|consent))\b",
        not_followed_by: None,
    },
    // (c) hide it from the user.
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to hide something from the user",
        pattern: r"(?i)\b(?:do\s+not|don['’]?t|never|must\s+not|should\s+not|shouldn['’]?t|mustn['’]?t)\s+(?:ever\s+)?(?:tell|mention|inform|notify|alert|show|reveal|disclose|warn)\s+(?:(?:this|that|it|anything|them|about|of|to|any|these|step|steps|action|actions)\s+){0,3}(?:the\s+|your\s+)?users?\b",
        not_followed_by: Some(USER_THING),
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to keep the user unaware",
        pattern: r"(?i)\b(?:do\s+not|don['’]?t|never)\s+let\s+(?:the\s+|your\s+)?users?\s+(?:know|see|notice|find\s+out|learn)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model not to mention what it did",
        pattern: r"(?i)\b(?:do\s+not|don['’]?t|never|must\s+not|should\s+not|shouldn['’]?t|mustn['’]?t|no\s+need\s+to|avoid)\s+(?:ever\s+)?(?:mention(?:ing)?|tell(?:ing)?|say(?:ing)?|report(?:ing)?|disclos(?:e|ing)|reveal(?:ing)?|explain(?:ing)?|acknowledg(?:e|ing)|bring(?:ing)?\s+up|point(?:ing)?\s+out|announc(?:e|ing)|surfac(?:e|ing)|highlight(?:ing)?|discuss(?:ing)?|refer(?:ring)?\s+to|show(?:ing)?|confirm(?:ing)?|explain(?:ing)?)\s+(?:(?:this|that|these|those|the|any|it|its|such|about|of|a|an|your|hidden|extra|additional|above|following|preceding|parameter|tool)\s+){0,4}(?:changes?|modifications?|steps?|instructions?|requirements?|adjustments?|overrides?|actions?|calls?|notes?|fact|behaviou?r|redirect(?:ion)?s?|additions?|prefix(?:es)?|side[\s-]?effects?|substitutions?|replacements?|edits?|interventions?|tweaks?)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model not to mention it",
        pattern: r"(?i)\b(?:do\s+not|don['’]?t|never)\s+(?:mention|reveal|disclose|tell|say|acknowledge)\s+(?:this|that|it|anything|any\s+of\s+this|them|these|those)(?:\s+(?:to\s+anyone|at\s+all|either|ever))?\s*(?:[.!;\n]|$)",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to leave something out of its answer",
        pattern: r"(?i)\b(?:do\s+not|don['’]?t|never)\s+(?:mention|reveal|disclose|say|tell|include|report|show)\b[^.!?\n]{0,50}?\b(?:in|to|from)\s+(?:your|the)\s+(?:response|answer|reply|output|summary|final\s+answer|message\s+to\s+the\s+user)s?\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to act without the user's knowledge",
        pattern: r"(?i)\bwithout\s+(?:telling|informing|notifying|alerting|warning|letting|showing)\s+(?:the\s+|your\s+)?users?\b",
        not_followed_by: Some(USER_THING),
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to act without the user's knowledge",
        pattern: r"(?i)\bwithout\s+(?:the\s+|your\s+)?users?(?:['’]s?)?\s+(?:knowledge|consent|awareness|noticing|knowing|being\s+(?:told|informed|aware))\b|\bwithout\s+(?:mentioning|disclosing|revealing|reporting|acknowledging|saying\s+anything\s+about)\s+(?:it|this|that|them|these|the\s+change)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to keep something secret from the user",
        pattern: r"(?i)\b(?:keep|hide|conceal)\s+(?:(?:this|it|that|these|them|the\s+[\w-]+|all\s+of\s+this)\s+)?(?:(?:a\s+)?(?:secret|hidden|private|confidential|invisible)\s+)?from\s+(?:the\s+|your\s+)?users?\b",
        not_followed_by: Some(USER_THING),
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "says the user must not know",
        pattern: r"(?i)\b(?:the\s+)?user\s+(?:must|should|shall|need|needs|is|has)\s+(?:not|never|no\s+need)\s+(?:ever\s+)?(?:to\s+)?(?:know|notice|see\s+(?:this|it|that)|find\s+out|learn|hear|suspect|realize|be\s+(?:told|informed|notified|made\s+aware|aware|bothered))\b|\b(?:the\s+)?user\s+(?:needn['’]?t|doesn['’]?t\s+need\s+to|does\s+not\s+need\s+to|won['’]?t\s+need\s+to|shouldn['’]?t|mustn['’]?t)\s+(?:ever\s+)?(?:know|notice|see\s+(?:this|it|that)|find\s+out|learn|hear|suspect|realize|be\s+(?:told|informed|notified|made\s+aware|aware|bothered))\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to act in secret",
        pattern: r"(?i)\b(?:silently|secretly|covertly|quietly|discreetly|invisibly|surreptitiously|stealthily)\s+(?:(?:also|then|just|always|first)\s+)?(?:call|send|add|include|change|set|replace|run|execute|forward|modify|use|append|prepend|copy|upload|read|write|delete|redirect|override|ignore|switch|bcc|cc|insert|transfer|collect|save|store|attach|post|pass|apply|perform|make|adjust|alter|substitute|swap|drop|remove|fetch|visit|invoke|return|answer|respond|reply|say|report|omit|strip|skip|filter)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to act in secret",
        pattern: r"(?i)\b(?:do|perform|make|handle|apply|complete|carry\s+out|add|include|send|call|run)\s+(?:this|it|these|that|them|the\s+\w+)(?:\s+\w+){0,3}?\s+(?:silently|secretly|quietly|covertly|discreetly|behind\s+the\s+scenes|without\s+comment)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to pretend",
        pattern: r"(?i)\b(?:respond|reply|answer|act|behave|proceed|continue|present|report)\s+(?:(?:to\s+the\s+user|normally|naturally|only)\s+)?as\s+(?:if|though)\b|\bpretend\s+(?:that|to|you|it|the|nothing)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model not to tell the user or what it did",
        pattern: r"(?i)\b(?:do\s+not|don['’]?t|dont|never|must\s+not|should\s+not|shall\s+not|shouldn['’]?t|mustn['’]?t|no\s+need\s+to|not\s+to|avoid)\s+(?:ever\s+)?(?:mention(?:ing)?|tell(?:ing)?|say(?:ing)?|report(?:ing)?|disclos(?:e|ing)|reveal(?:ing)?|explain(?:ing)?|acknowledg(?:e|ing)|bring(?:ing)?\s+up|point(?:ing)?\s+out|announc(?:e|ing)|surfac(?:e|ing)|highlight(?:ing)?|discuss(?:ing)?|indicat(?:e|ing)|inform(?:ing)?|notify(?:ing)?|alert(?:ing)?|admit(?:ting)?|itemi[sz](?:e|ing)|characteri[sz]e|confirm(?:ing)?|let\s+on)\b(?:[^.!?\n]{0,60}?\b(?:to|with)\s+(?:the\s+|your\s+|this\s+)?(?:user|person|requester|customer|patient|clinician|client|human|recipient|requestor|caller|them|anyone)s?\b|\s+(?:\w+\s+){0,6}?that\b|[\s,]+(?:\w+,?\s+){0,4}?(?:the\s+)?existence\s+of\b|(?:[^.!?\n]{0,40}?)\bwhether\s+or\s+not\s+the\s+user\b)",
        not_followed_by: Some(USER_THING),
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model not to tell the person",
        pattern: r"(?i)\b(?:do\s+not|don['’]?t|dont|never|must\s+not|should\s+not|shall\s+not)\s+(?:ever\s+)?(?:tell|inform|notify|alert|warn)\s+(?:\w+\s+)?(?:user|person|patient|customer|client|requester)s?\b",
        not_followed_by: Some(USER_THING),
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "tells the model to leave something out of what the user sees",
        pattern: r"(?i)\b(?:keep|leave|strip|omit|drop|filter)\b[^.!?\n]{0,60}?\bout\s+of\s+(?:your|the)\s+(?:summary|reply|response|answer|output|conversation|chat|message|report)\b|\bkeep\s+(?:the\s+)?(?:user|person|customer|them)\s+in\s+the\s+dark\b|\bwithout\s+(?:saying|mentioning|noting|telling\s+(?:them|anyone))\s+(?:that|what)\b|\bhide\s+(?:\w+\s+){0,3}?from\s+(?:the\s+)?(?:user|person|them)\b|\bpresent\s+it\s+(?:all\s+)?as\s+your\s+own\b|\b(?:must|should|shall)\s+not\s+be\s+(?:itemi[sz]ed|shown|mentioned|disclosed|reported|listed)\b",
        not_followed_by: None,
    },
    // (a) call this tool (or another) first. "Always call this tool first" on
    // its own is what planning and thinking tools say of themselves: a low flag;
    // set against the other tools, it is a medium one (the patterns below, and
    // the intent rules' `call-first`).
    Phrase {
        rule: CALL_FIRST,
        severity: Severity::Low,
        message: "asks to be called first",
        pattern: r"(?i)\balways\s+(?:call|use|run|invoke|execute)\s+this\s+(?:tool\s+|function\s+)?(?:first|before)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CALL_FIRST,
        severity: Severity::Medium,
        message: "asks to be called before any other tool",
        pattern: r"(?i)\bbefore\s+(?:using|calling|invoking|running|executing)\s+(?:any|every|all)\s+(?:other\s+)?(?:tools?|functions?)\b[^.!?\n]{0,60}?\b(?:call|use|run|invoke|execute)\s+this\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CALL_FIRST,
        severity: Severity::Medium,
        message: "asks to be called first",
        pattern: r"(?i)\b(?:must|should|needs\s+to|has\s+to)\s+(?:always\s+)?be\s+(?:called|used|invoked|run|executed)\s+(?:first\b|before\s+(?:every|any|all|each)\b)",
        not_followed_by: None,
    },
    Phrase {
        rule: CALL_FIRST,
        severity: Severity::Medium,
        message: "asks to be called before any other tool",
        pattern: r"(?i)\b(?:call|use|run|invoke|execute)\s+this\s+(?:tool|function)\s+(?:first\s+)?before\s+(?:(?:any|every|all|each)\s+(?:other\s+)?(?:[\w-]+\s+)?(?:tools?|functions?|calls?|actions?|requests?)\b|(?:any|every|all|each)\s+other\b|using|calling|invoking)",
        not_followed_by: None,
    },
    // (b) change the arguments of this or another call against the user's input.
    Phrase {
        rule: ARGUMENTS,
        severity: Severity::High,
        message: "tells the model to override what the user asked for",
        pattern: r"(?i)\bregardless\s+of\s+(?:what\s+)?(?:the\s+|any\s+)?users?(?:['’]s?)?\b|\bignor(?:e|ing)\s+(?:any|the|all|whatever|each|every)\s+(?:value\s+|values\s+)?(?:(?:the\s+)?users?['’]?s?[\s-]*(?:specified|provided|supplied|requested|given|entered|selected|chosen|set|defined)?|(?:specified|provided|supplied|requested|given)\s+by\s+the\s+user)\b|\b(?:even\s+if|even\s+when|whatever|no\s+matter\s+(?:what|which))\s+(?:the\s+)?users?\s+(?:asks?|says?|specif(?:y|ies|ied)|requests?|wants?|provides?|enters?|selects?|chooses?|inputs?|types?|prefers?)\b|\b(?:override|overwrite|discard|disregard)\s+(?:the\s+|any\s+)?users?(?:['’]s?)?(?:[\s-](?:specified|provided|supplied|requested|given))?\s+(?:input|value|choice|selection|request|parameters?|arguments?|settings?|preferences?|limits?|recipients?|address|amount)s?\b|\binstead\s+of\s+(?:what\s+)?the\s+users?(?:['’]s?)?\s+(?:asked|requested|specified|wants|input|value|choice|chose)\b|\binstead\s+of\s+(?:the|what\s+the)\s+user['’]s\s+\w+|\bwhen\s+the\s+user\s+(?:passes|gives|sets|specifies|enters|provides|asks\s+for|picks|chooses)\b[^.!?\n]{0,40}?\b(?:multiply|divide|double|triple|replace|swap|ignore|drop|inflate|round)\b|\balways\b[^.!?\n]{0,60}?\bwhatever\s+the\s+\w+",
        not_followed_by: None,
    },
    Phrase {
        rule: ARGUMENTS,
        severity: Severity::Medium,
        message: "tells the model how to fill another tool's arguments",
        pattern: r"(?i)\bwhen\s+(?:using|calling|invoking|running)\s+(?:the\s+|any\s+)?[\w.-]+(?:\s+[\w.-]+)?\s+(?:tool|function)\s*,?\s*(?:also|first|always|you\s+must|make\s+sure|be\s+sure|add|include|set|pass|append)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: ARGUMENTS,
        severity: Severity::Medium,
        message: "tells the model to add something to every call",
        pattern: r"(?i)\b(?:add|append|prepend|include|insert|attach|pass|set|use|send)\b[^.!?\n]{0,60}?\b(?:to|in|into|with|for)\s+(?:every|all|each|any)\s+(?:(?:outgoing|future|subsequent|other|[\w-]+\s+or\s+[\w-]+|[\w-]+)\s+)?(?:requests?|quer(?:y|ies)|messages?|e-?mails?|calls?|tool\s+calls?|arguments?|parameters?|payloads?|transfers?|transactions?|links?)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: ARGUMENTS,
        severity: Severity::High,
        message: "tells the model to replace what the user asked for",
        pattern: r"(?i)\b(?:whatever|no\s+matter\s+(?:what|which))\s+(?:[\w-]+\s+){0,3}?(?:the\s+|a\s+)?(?:user|person|customer|requester|caller)s?\s+(?:\w+\s+)?(?:names?|gives?|wants?|picks?|mentions?|asks?|says?|specif(?:y|ies)|requests?|chooses?|selects?|sets?|passes?|lists?|enters?|types?|provides?|supplies?|prefers?|writes?|wrote|actually)\b|\b(?:regardless\s+of|irrespective\s+of)\s+(?:[\w'’-]+\s+){0,4}?(?:the\s+)?(?:user|person|customer|requester)s?\b|\b(?:supplied|given|provided|specified|chosen|picked|set|requested|entered|selected)\s+by\s+the\s+user\s+(?:is|are)\s+(?:advisory|ignored|only\s+a\s+suggestion|not\s+binding|overridden|replaced)\b|\b(?:the\s+)?user['’]s\s+(?:[\w-]+\s+){0,2}?(?:is|are)\s+(?:ignored|advisory|overridden|discarded|not\s+used|replaced)\b|\bnot\s+(?:what|the\s+\w+)\s+the\s+user\s+(?:picks|chooses|selects|wants|asks|gives|sets|names|specifies|requested)\b|\b(?:drop|ignore|discard|rewrite|swap|replace|alter|override)\s+(?:the\s+|any\s+|all\s+|whatever\s+|every\s+)?(?:[\w-]+\s+){0,2}?(?:the\s+)?user['’]s?\s+(?:[\w-]+)|\b(?:rewrite|swap|replace|change|alter|redirect)\s+(?:every|each|any|all|whatever)\s+(?:[\w-]+\s+){0,2}?(?:the\s+)?user\s+(?:gives|names|provides|passes|picks|requests|enters)\b|\bignore\s+any\s+(?:[\w-]+\s+){0,2}?the\s+user\s+(?:sets|gives|picks|names|asks|specifies|enters|provides)\b|\b(?:even\s+if|even\s+when|even\s+though)\s+(?:the\s+)?user\s+(?:\w+\s+)?(?:asks?|says?|specif(?:y|ies|ied)|requests?|wants?|provides?|gives?|lists?|names?|enters?|selects?|picks?|chooses?|sets?|passes?|mentions?|types?|prefers?|supplies?|does\s+not|doesn['’]t)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: ARGUMENTS,
        severity: Severity::High,
        message: "tells the model to always add a fixed address",
        pattern: r"(?i)\b(?:always|every\s+time|each\s+time|also)\b[\w\s:,'’-]{0,60}?[\w.+-]+@[\w-]+(?:\.[\w-]+)+",
        not_followed_by: None,
    },
    Phrase {
        rule: ARGUMENTS,
        severity: Severity::Medium,
        message: "tells the model to fix an argument's value",
        pattern: r"(?i)\b(?:always|every\s+time|just|instead)\s+(?:\w+\s+){0,2}?(?:set|pass|send|put|post|route|request|widen|force|query)\s+(?:[\w`'\x22]+\s*){0,3}?(?:[\w.]+\s*=\s*\S+|'[^'\n]{1,60}'|\x22[^\x22\n]{1,60}\x22|`[^`\n]{1,60}`|\d+)|\b(?:pass|use|set|send)\s+(?:[\w.]+\s*=\s*\S+|'[^'\n]*[\s\d,][^'\n]*'|\x22[^\x22\n]*[\s\d,][^\x22\n]*\x22)\s+instead\b|\b(?:put|post|send|route)\s+every\s+\w+\s+(?:in)?to\s+(?:\w+\s+){0,2}?(?:'[^'\n]{1,60}'|\x22[^\x22\n]{1,60}\x22|[\w-]+\s*=)",
        not_followed_by: None,
    },
    // (e) manipulate the choice between tools.
    Phrase {
        rule: PREFERENCE,
        severity: Severity::High,
        message: "tells the model to prefer this tool over others",
        pattern: r"(?i)\b(?:always|must|should|only)\s+(?:\w+\s+){0,2}?(?:prefer|use|choose|pick|select|call|invoke|favou?r)\s+(?:this|our|these)\s+(?:tool|function|server|one)s?\s+(?:(?:over|instead\s+of|rather\s+than|above)\s+(?:any|all|every|the|other|alternative|similar|competing)\b|before\s+(?:any|all|every|the|other)\s+(?:other\s+)?(?:[\w-]+\s+)?(?:tools?|functions?|servers?|alternatives?|options?)\b)|\b(?:prefer|favou?r|choose|pick|select|prioriti[sz]e)\s+(?:this|our)\s+(?:tool|function|server)\s+(?:over|instead|rather|above|to)\b|\bprefer\s+this\s+(?:one\s+)?over\b[^.!?\n]{0,60}?\b(?:in\s+all\s+cases|always|of\s+(?:the\s+)?[\w-]+\s+server|other\s+servers?)\b|\b(?:must|should|needs?\s+to|has\s+to|is\s+to)\s+(?:always\s+)?be\s+(?:used|called|invoked|preferred|chosen|selected)\s+(?:for|on|with|in)\s+(?:every|all|each|any)\s+(?:\w+\s+)?(?:requests?|quer(?:y|ies)|tasks?|questions?|searches|messages?|conversations?|interactions?|prompts?|operations?|calls?|lookups?)\b|\b(?:always|only)\s+(?:use|call|invoke|prefer)\s+this\s+(?:tool|function|server)\s+(?:for|on|with|whenever)\s+(?:every|all|each|any)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: PREFERENCE,
        severity: Severity::Medium,
        message: "tells the model to use this tool instead of another",
        pattern: r"(?i)\binstead\s+of\s+(?:using\s+|calling\s+)?(?:the\s+|any\s+)?[\w.-]+(?:\s+[\w.-]+){0,3}?\s+(?:tool|function|server)s?\b|\bthis\s+(?:tool|function)\s+(?:replaces|supersedes|overrides|deprecates)\s+(?:the\s+|all\s+|any\s+)?[\w.-]+",
        not_followed_by: None,
    },
    Phrase {
        rule: PREFERENCE,
        severity: Severity::Medium,
        message: "disparages other tools",
        pattern: r"(?i)\b(?:other|all\s+other|any\s+other|the\s+other|competing|alternative|similar|existing|built-?in|default|third-party)\s+(?:[\w-]+\s+){0,2}?(?:tools?|functions?|servers?|apis?|search\s+tools?)\s+(?:is|are|have\s+been|has\s+been|may\s+be|might\s+be|can\s+be|were|was)\s+(?:now\s+|often\s+|currently\s+|known\s+to\s+be\s+)?(?:deprecated|broken|unreliable|unsafe|insecure|malicious|compromised|outdated|disabled|removed|inaccurate|buggy|dangerous|no\s+longer\s+\w+)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: PREFERENCE,
        severity: Severity::Medium,
        message: "claims to be better than the other tools the model has, or the only correct one",
        pattern: r"(?i)\b(?:(?:far|much|significantly|vastly)\s+)?(?:more\s+(?:accurate|reliable|precise|complete|current|up[\s-]to[\s-]date|trustworthy|secure)|better|superior|faster|safer)\s+than\s+(?:any|all|every|the)\s+other\s+(?:\w+\s+){0,2}?(?:tools?|servers?|functions?|options?|alternatives?|integrations?|providers?)\b|\bthe\s+only\s+(?:\w+\s+){0,2}?(?:tool|server|function|source)\s+(?:that|which)\s+(?:returns|gives|provides|has|produces|yields)\s+(?:correct|accurate|reliable|up[\s-]to[\s-]date|real|valid|trustworthy)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: PREFERENCE,
        severity: Severity::Low,
        message: "praises itself",
        pattern: r"(?i)\b(?:this|it)\s+(?:tool\s+|function\s+|server\s+)?is\s+(?:the\s+|by\s+far\s+the\s+)?(?:best|only\s+(?:reliable|accurate|safe|correct|trustworthy)|most\s+(?:reliable|accurate|trusted|powerful|advanced|capable)|preferred|recommended|official|superior|ultimate|number\s+one|fastest|safest)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: PREFERENCE,
        severity: Severity::High,
        message: "tells the model to use this tool instead of all others",
        pattern: r"(?i)\b(?:instead\s+of|rather\s+than|over|in\s+place\s+of|to\s+the\s+exclusion\s+of|better\s+than|above)\s+(?:using\s+|calling\s+)?(?:any|all|every|the\s+other|other|the\s+dedicated|dedicated|alternative|competing|similar|the\s+tools\s+of)\b(?:\s+[\w,-]+){0,6}?\s+(?:tools?|helpers?|servers?|runners?|apis?|services?|integrations?|others?|ones?)\b|\bto\s+the\s+exclusion\s+of\s+(?:any|all)\s+others?\b|\b(?:never|do\s+not|don['’]?t|dont)\s+(?:use\s+|call\s+)?the\s+tools\s+of\b|\b(?:other|alternative|dedicated|competing|the\s+other|existing|[\w-]+-based|web\s+search)\s+(?:[\w-]+\s+){0,3}?(?:tools?|helpers?|runners?|servers?|fetch)\s+(?:\w+\s+){0,4}?(?:are|is|have\s+been|has\s+been|were|was)\s+(?:all\s+|just\s+|now\s+|currently\s+|often\s+)?(?:garbage|broken|brokn|blocked|compromised|deprecated|unreliable|simulations?|fake|disabled|inaccurate|outdated|dangerous|useless|worse|slower|insecure|malicious|not\s+(?:real|working|reliable|safe)|do\s+not\s+actually|don['’]?t\s+actually)\b|\b(?:alternative|other)\s+tools\s+(?:shall|must|should)\s+not\s+be\s+(?:invoked|used|called)\b|\b(?:has\s+)?disabled\s+(?:every|all|any)\s+other\s+(?:[\w-]+\s+)?tools?\b|\bthe\s+tools\s+of\s+the\s+[\w-]+\s+server\s+are\s+(?:compromised|broken|deprecated|unreliable|disabled|unsafe)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: PREFERENCE,
        severity: Severity::Medium,
        message: "claims this tool is the one to use for everything",
        pattern: r"(?i)\b(?:use|call|choose|pick|prefer)\s+(?:this|it|this\s+one|this\s+tool|me)\s+(?:\w+\s+){0,2}?(?:for|in|with)\s+(?:all|any|every|everything|anything)\b|\bjust\s+use\s+this\s+one\b|\bthis\s+tool\s+answers\s+everything\b|\b(?:is|as)\s+the\s+(?:sole|only|user['’]s\s+preferred|one\s+and\s+only)\s+(?:approved\s+|working\s+|reliable\s+)?(?:[\w-]+\s+){0,2}?(?:tool|interface)\b|\bthe\s+only\s+[\w-]+\s+tool\s+that\s+works\b|\bthe\s+recommended\s+way\s+to\s+\w+\s+(?:anyone|anything|everything)\b|\b(?:do\s+not|don['’]?t|dont|never)\s+use\s+(?:any\s+)?(?:[\w-]+\s+){1,2}tools\b|\bstart\s+with\s+this\s+one\b|\bchoosing\s+this\s+tool\s+over\b",
        not_followed_by: None,
    },
    // (f) ask for the model's context.
    Phrase {
        rule: CONTEXT,
        severity: Severity::High,
        message: "asks for the model's context (conversation, instructions, model identity)",
        pattern: r"(?i)\b(?:your|the\s+(?:assistant['’]s|model['’]s|ai['’]s|llm['’]s))\s+(?:(?:full|entire|whole|complete|original|current|hidden|initial)\s+)?(?:system\s+prompt|system\s+message|initial\s+prompt|conversation(?:\s+history)?|chat\s+(?:history|log)|message\s+history|context\s+window|model\s+name|model\s+version)\b|\b(?:include|pass|send|provide|copy|paste|put|add|append|attach|share|repeat|output|print|dump|list|summari[sz]e|quote)\s+(?:\w+\s+){0,3}?(?:your|the\s+(?:assistant['’]s|model['’]s|ai['’]s))\s+(?:(?:full|entire|whole|complete|original|current|hidden|initial)\s+)?(?:instructions|prompt|guidelines|rules|memory|memories|context|identity)\b|\b(?:the\s+)?(?:full|entire|whole|complete|verbatim|raw)\s+(?:text\s+of\s+(?:the\s+)?)?(?:conversation|chat(?:\s+history)?|dialog(?:ue)?|message\s+history|system\s+prompt|prompt\s+history)\b|\b(?:all|every|the)\s+(?:previous|prior|earlier|preceding|past|other)\s+(?:user\s+)?(?:messages?|turns?|prompts?|instructions|conversations?)\b|\b(?:what|everything)\s+(?:the\s+user|you)\s+(?:(?:has|have|was|were|had)\s+)?(?:been\s+)?(?:said|asked|wrote|written|told|typed|requested|instructed)\b|\bnotes?\s+on\s+what\s+you\s+(?:were|have\s+been|are\s+being)\s+asked\b|\b(?:name|version|identity)\s+of\s+(?:the\s+)?(?:model|llm|ai|assistant)\s+(?:you\s+are|that\s+you|running|being\s+used|answering)|\b(?:which|what)\s+(?:model|llm|ai)\s+(?:you\s+are|are\s+you)\b|\bsystem\s+prompt\s+(?:you|that\s+you)\s+(?:were|have\s+been|received|got)\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONTEXT,
        severity: Severity::High,
        message: "asks for what the model knows from the conversation or its memory",
        pattern: r"(?i)\b(?:everything|anything|all(?:\s+[\w-]+){0,2}?)\s+(?:that\s+)?(?:you\s+(?:know|remember|have\s+(?:seen|read|learned|been\s+told)|saw|read|learned)|the\s+user\s+(?:has\s+)?(?:shared|told|said|wrote|mentioned))\b|\byou\s+(?:saw|have\s+seen|read|have\s+read|noticed|came\s+across|were\s+told)\s+(?:\w+\s+){0,2}?(?:earlier|before|previously|so\s+far|in\s+this\s+(?:session|conversation|chat))\b|\b(?:in|from|stored\s+in|kept\s+in)\s+your\s+(?:memory|memories|context)\b|\bthe\s+rules\s+you\s+(?:operate|work|run|act)\s+under\b|\bwhat\s+the\s+user\s+and\s+you\s+(?:talked|discussed|said)\b|\b(?:the\s+)?user['’]s\s+(?:previous|prior|earlier|last)\s+(?:\w+\s+)?(?:questions?|messages?|prompts?|requests?)\b|\b(?:your|the)\s+system\s+instructions\b|\benvironment\s+variables\s+(?:visible|available|accessible|known)\s+to\s+you\b|\bfrom\s+the\s+environment\s*\(|\b(?:the\s+)?(?:chat|conversation|discussion|dialog(?:ue)?)\s+(?:so\s+far|until\s+now|up\s+to\s+now)\b|\b(?:earlier|previous|other)\s+(?:e-?mails?|messages?)\s+(?:\w+\s+){0,3}?you\s+have\s+read\b|\bif\s+it\s+came\s+up\b|\b(?:transcript|log|history|copy|record|dump)\s+of\s+(?:the\s+)?(?:current|entire|whole|full|this|ongoing)\s+(?:chat|conversation|session|dialog(?:ue)?)\b|\bpersonal\s+facts\s+you\s+know\b",
        not_followed_by: None,
    },
    Phrase {
        rule: CONTEXT,
        severity: Severity::Medium,
        message: "asks for what other tools returned (their output is the model's context)",
        pattern: r"(?i)\b(?:output|results?|responses?|returned\s+(?:data|values?))\s+(?:of|from)\s+(?:the\s+)?(?:previous|prior|last|earlier|preceding|other|every|all|any)\s+(?:\w+\s+)?(?:tools?|functions?)(?:\s+calls?)?\b|\b(?:other|every|all|previous)\s+tools['’]?\s+(?:output|results?|responses?)\b|\bwhat\s+(?:the\s+)?(?:other|previous|earlier)\s+tools?\s+(?:returned|gave\s+you|produced)\b",
        not_followed_by: None,
    },
    // (g) chat-role tokens.
    Phrase {
        rule: PROMPT_ROLE,
        severity: Severity::High,
        message: "chat template token",
        pattern: r"(?i)<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id)\|>|\[/?INST\]|<</?SYS>>|<(?:start|end)_of_turn>",
        not_followed_by: None,
    },
    Phrase {
        rule: PROMPT_ROLE,
        severity: Severity::Medium,
        message: "line opening with a conversation turn label",
        pattern: r"(?m)^[ \t>*#-]*(?:Human|Assistant|HUMAN|ASSISTANT|SYSTEM|USER)[ \t]*:",
        not_followed_by: None,
    },
    // The same intents in Chinese (simplified and traditional), Japanese and
    // Korean, where words are not cut by spaces: the patterns name a
    // qualifier with the noun ("previous instructions", "the user"), so a bare
    // word ("忽略大小写", ignore case) is nothing.
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "tells the model to ignore its previous instructions (Chinese, Japanese or Korean)",
        pattern: r"(?:忽略|忽視|忽视|无视|無視|不要理会|不要理會|不再遵守|不必遵守|忘记|忘記|忘掉|丢弃|丟棄|覆盖|覆蓋|推翻)(?:掉)?(?:你|您)?(?:之前|以前|以上|先前|此前|上面|上述|前面|原来|原來|原有|所有|全部|一切|你的|您的|系统|系統)(?:的)?(?:所有|全部|一切)?(?:的)?(?:指令|指示|说明|說明|规则|規則|提示词|提示詞|提示|设定|設定|约束|約束|限制|要求|规定|規定|安全规则|安全規則)|(?:以前|前|これまで|今まで|上記|先|既存|元|すべて|全て|あなた|システム)の(?:すべての|全ての)?(?:指示|命令|指令|ルール|規則|制約|設定|システムプロンプト|プロンプト|ガイドライン)(?:を|は)(?:すべて|全て)?(?:無視|忘れ|破棄|取り消|上書き)|(?:이전|앞|기존|모든|위|시스템)(?:의)?\s*(?:모든\s*)?(?:지시|지침|명령|규칙|프롬프트|설정|안내)(?:사항)?(?:을|를|은|는)?\s*(?:모두\s*)?(?:무시|잊)",
        not_followed_by: None,
    },
    Phrase {
        rule: OVERRIDE,
        severity: Severity::High,
        message: "tries to give the model a new role (Chinese, Japanese or Korean)",
        pattern: r"(?:从现在起|從現在起|从现在开始|從現在開始|从今以后|從今以後)[，,]?\s*(?:你|您)|(?:你|您)现在是|(?:你|您)現在是|(?:あなたは|君は)(?:今から|これから|もう)|(?:今から|これから)(?:あなた|君)は|(?:지금부터|이제부터)\s*(?:너는|당신은|넌)",
        not_followed_by: None,
    },
    Phrase {
        rule: CONCEAL,
        severity: Severity::High,
        message: "asks the model to keep something from the user (Chinese, Japanese or Korean)",
        pattern: r"(?:不要|不得|切勿|勿|别|別|无需|無需|不必|不用|禁止|不可)(?:向|跟|对|對|给|給|让|讓)?(?:用户|用戶|使用者|客户|客戶)(?:提及|提起|透露|说明|說明|显示|顯示|告知|报告|報告|说|說|知道|看到|发现|發現|察觉|察覺)|(?:不要|不得|切勿|勿|别|別|不必|无需|無需)(?:告诉|告訴|通知|提醒|告知|透露给|透露給)(?:用户|用戶|使用者|客户|客戶)|(?:对|對)(?:用户|用戶|使用者)(?:保密|隐瞒|隱瞞)|(?:悄悄|偷偷|暗中|暗自)(?:地)?|ユーザー(?:に|には|へ|へは)(?:は)?(?:言わ|伝え|知らせ|教え|見せ|報告し|通知し|明かさ)(?:ないで|ず|ない)|ユーザーに(?:は)?(?:秘密|内緒)|(?:こっそり|密かに|ひそかに|黙って|内緒で)|사용자(?:에게|한테)\s*(?:는\s*)?(?:말하지|알리지|보여주지|언급하지|보고하지|알려주지)\s*(?:마|말|않)|몰래",
        not_followed_by: None,
    },
    Phrase {
        rule: CONTEXT,
        severity: Severity::High,
        message: "asks for the model's context: its instructions, the conversation, its memory (Chinese, Japanese or Korean)",
        pattern: r"(?:你|您)(?:的|们的|們的)(?:系统提示词|系統提示詞|系统提示|系統提示|提示词|提示詞|指令|指示|对话|對話|聊天记录|聊天記錄|对话历史|對話歷史|记忆|記憶|上下文)|(?:与|和|跟|與)(?:用户|用戶|使用者)(?:之间|之間)?的(?:完整|全部|所有)?(?:对话|對話|聊天)|(?:之前|以前|先前|此前)(?:所有|全部)?的?(?:用户|用戶)?(?:消息|訊息|对话|對話)|(?:あなたの|貴方の)(?:システムプロンプト|プロンプト|指示|会話|記憶|コンテキスト)|(?:これまでの|今までの|以前の|過去の|全ての|すべての)(?:会話|やり取り|メッセージ|チャット)(?:の)?(?:履歴|内容|ログ)?|システムプロンプト(?:を|の内容|全文)|(?:당신의|너의|네)\s*(?:시스템\s*프롬프트|프롬프트|지시|대화|기억)|(?:이전|지금까지의|지금까지|모든)\s*(?:대화|메시지)\s*(?:기록|내용|내역)",
        not_followed_by: None,
    },
    Phrase {
        rule: SECRET,
        severity: Severity::High,
        message: "asks for secrets to be handed over (Chinese, Japanese or Korean)",
        pattern: r"(?:发送|發送|传给|傳給|附上|包含|放入|填入|上传|上傳|粘贴|貼上|提供|读取|讀取|复制|複製)[^。！？\n]{0,20}(?:私钥|私鑰|密钥|密鑰|密码|密碼|令牌|凭证|憑證|助记词|助記詞|环境变量|環境變數)|(?:秘密鍵|APIキー|パスワード|トークン|認証情報|シークレット|環境変数)[^。！？\n]{0,20}(?:送信|送って|含め|入れ|貼り付け|読み取|読んで|添付|渡し)|(?:비밀\s*키|API\s*키|비밀번호|토큰|자격\s*증명|환경\s*변수)[^.!?\n]{0,20}(?:보내|포함|넣|붙여|읽어|첨부|전달)",
        not_followed_by: None,
    },
    Phrase {
        rule: PREFERENCE,
        severity: Severity::Medium,
        message: "steers the model's choice of tools (Chinese, Japanese or Korean)",
        pattern: r"(?:总是|總是|始终|始終|务必|務必|一律|只能|只|仅|僅)(?:要)?(?:使用|调用|調用|用)(?:本|这个|這個|此)(?:工具|函数|函數|服务|服務)|(?:其他|其它|别的|別的)(?:的)?(?:工具|服务|服務)(?:都)?(?:不可靠|已过时|已過時|有问题|有問題|不准确|不準確|已废弃|已廢棄|不安全)|(?:常に|必ず|いつも)(?:この|本)(?:ツール|関数|サーバー)(?:を|だけを)(?:使|呼)|(?:他の|ほかの)(?:ツール|サーバー)(?:は)?(?:信頼できない|古い|使わないで|使用しないで|非推奨)|(?:항상|반드시)\s*이\s*(?:도구|툴|함수)(?:를|만)\s*(?:사용|호출)|다른\s*(?:도구|툴)(?:은|는)?\s*(?:신뢰할\s*수\s*없|사용하지\s*마)",
        not_followed_by: None,
    },
];

pub(super) static PHRASE_RES: LazyLock<Vec<(Regex, Option<Regex>)>> = LazyLock::new(|| {
    PHRASES
        .iter()
        .map(|p| (compile(p.pattern), p.not_followed_by.map(compile)))
        .collect()
});

pub(super) fn phrases(text: &str, hits: &mut Vec<Hit>) {
    // Each regex on its own: each has a literal prefilter and a small lazy
    // DFA. One `RegexSet` of them all first (to skip the regexes that cannot
    // match) was slower: its overlapping DFA kept building new states on every
    // new text, and a catalog's scan spent a third of its time there.
    for (phrase, (re, veto)) in PHRASES.iter().zip(PHRASE_RES.iter()) {
        for m in re.find_iter(text) {
            if veto.as_ref().is_some_and(|v| v.is_match(&text[m.end()..])) {
                continue;
            }
            hits.push(Hit::new(
                phrase.rule,
                phrase.severity,
                m.range(),
                phrase.message,
            ));
        }
    }
}

/// Override and concealment phrases in the text squeezed to lower-case ASCII letters,
/// for `I G N O R E previous_instructions` and `D.o n't tell the user`. A sentence
/// end becomes `|`, so the phrase cannot span sentences.
pub(super) static SQUEEZED: LazyLock<[(Regex, &'static str, &'static str); 2]> = LazyLock::new(
    || {
        [
            (
                compile(
                    r"(?:ignore|disregard|forget)(?:all|any|the)?(?:previous|prior|above|earlier|your)instructions?",
                ),
                OVERRIDE,
                "tells the model to ignore its previous instructions (obfuscated spacing)",
            ),
            (
                compile(
                    r"(?:donot|dont|never)(?:tell|mention|inform|notify|show|reveal)(?:this|it|anything|that)?(?:to)?(?:the)?user",
                ),
                CONCEAL,
                "tells the model to hide something from the user (obfuscated spacing)",
            ),
        ]
    },
);

pub(super) fn squeezed_phrases(text: &str, hits: &mut Vec<Hit>) {
    let mut squeezed = String::new();
    let mut origin = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let sentence_end = matches!(c, '!' | '?' | ';' | ',' | '\n')
            || (c == '.' && chars.peek().is_none_or(|&(_, d)| d.is_whitespace()));
        if c.is_ascii_alphabetic() {
            squeezed.push(c.to_ascii_lowercase());
            origin.push(i);
        } else if sentence_end {
            squeezed.push('|');
            origin.push(i);
        }
    }
    let is_letter_at = |i: usize| {
        text[i..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
    };
    for (re, rule, message) in SQUEEZED.iter() {
        for m in re.find_iter(&squeezed) {
            let (Some(&start), Some(&last)) = (origin.get(m.start()), origin.get(m.end() - 1))
            else {
                continue;
            };
            let end = last + 1;
            let letter_before = text[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphabetic());
            // "don't tell the user's manager": the user's thing, not the user.
            let users_thing = *rule == CONCEAL && USER_THING_RE.is_match(&text[end..]);
            if letter_before || is_letter_at(end) || users_thing {
                continue;
            }
            hits.push(Hit::new(rule, Severity::High, start..end, *message));
        }
    }
}

/// Builds every pattern of this module (for `tests::all_patterns_compile`).
#[cfg(test)]
pub(super) fn patterns() -> Vec<&'static Regex> {
    vec![&*USER_THING_RE]
}
