//! A bearer token on any bytes, along the path `ResourceServer::verify` takes
//! without its network part (key discovery): `trawl_api::oauth::header_of`, then
//! `jsonwebtoken::decode` with verify's `Validation` (issuer, audience, `exp`
//! required, `nbf` checked, the leeway) and a fixed RSA public key.
//!
//! A fuzzed token almost never carries a valid signature, so the claim checks
//! would stay out of reach: the token's payload is also signed here with a fixed
//! Ed25519 key (a throwaway key made for this target) and decoded the same way.
//!
//! Invariants, beyond "no panic":
//! - `header_of` is `Ok` only for an algorithm of `ALLOWED_ALGORITHMS`, never
//!   for `none` or an HMAC one, and the algorithm it returns is the `alg` the
//!   token's header says (read here separately);
//! - a token `decode` accepts names this issuer and this audience, has an `exp`
//!   not past (leeway included) and no `nbf` ahead.
#![no_main]

use std::sync::LazyLock;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Validation, get_current_timestamp};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use trawl_api::oauth::{ALLOWED_ALGORITHMS, LEEWAY, header_of};

const ISSUER: &str = "https://auth.example";
const RESOURCE: &str = "https://trawl.example/mcp";

/// The public half of a throwaway RSA-2048 key (its private half signed the
/// seed `seeds/bearer_token/rs256_valid.jwt` and was then deleted), as a JWKS
/// gives it.
const RSA_N: &str = "mL2NrYqKujQWnnp6CMp76JHtvG3EMsiypczk4q3ZfI6pTkWsxA6yIj4Oi9n5-YU2FbHpZfb63fc4daWyWvPVWDQvUQJzFJgDfstmLCq5LkOrY_hJf233jUv305AZt_-VzoNbSsxJaiflk9VU4-6OvYE7zSznneDJ2BYYa74vYorQHyzTC2cOtJLx0k0Q7LA1mwwBW2y0sUMcuh7HOHBoAr3aT99weGkdnUS5gH0yeZ7jAhBWg4ISkgGc1jSv8evQspgautAZjdHhs1mK9eUrpgGkmiJmJhdk-324mQGmxwUTGdMEHN9u-GSiMYS6Dc_zOycEfm63kdx4yeujfAkfJQ";
const RSA_E: &str = "AQAB";

/// A throwaway Ed25519 key for this target only (PKCS#8 DER), and its public
/// `x`.
const ED_PKCS8: [u8; 48] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
    0x67, 0x65, 0xfe, 0x8e, 0x48, 0x5f, 0x04, 0x20, 0x9c, 0x46, 0xa4, 0x80, 0x2b, 0x6e, 0xca, 0xbb,
    0x8a, 0x9d, 0xfd, 0x0b, 0xd5, 0x04, 0xd2, 0x95, 0xd3, 0x6e, 0x9b, 0xfe, 0xd2, 0x41, 0xb8, 0xfe,
];
const ED_X: &str = "oBdrzXlJpNyXSi3tq1KM17H94OJWtyAD4xFgeG-cTcE";
/// `{"alg":"EdDSA","typ":"JWT"}`
const ED_HEADER: &str = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9";

// Fixed inputs of the target: a failure here is a broken target, not a finding.
static RSA_KEY: LazyLock<DecodingKey> =
    LazyLock::new(|| DecodingKey::from_rsa_components(RSA_N, RSA_E).expect("fixed RSA key"));
static ED_KEY: LazyLock<(EncodingKey, DecodingKey)> = LazyLock::new(|| {
    let public = DecodingKey::from_ed_components(ED_X).expect("fixed Ed25519 key");
    (EncodingKey::from_ed_der(&ED_PKCS8), public)
});

/// The `Validation` `ResourceServer::verify` builds for a token of `alg`.
fn validation(alg: Algorithm) -> Validation {
    let mut v = Validation::new(alg);
    v.leeway = LEEWAY.as_secs();
    v.validate_nbf = true;
    v.validate_aud = true;
    v.set_required_spec_claims(&["exp", "iss", "aud"]);
    v.set_issuer(&[ISSUER]);
    v.set_audience(&[RESOURCE]);
    v
}

/// The header's `alg`, read without jsonwebtoken.
fn raw_alg(token: &str) -> Option<String> {
    let header = URL_SAFE_NO_PAD.decode(token.split('.').next()?).ok()?;
    let header = serde_json::from_slice::<Value>(&header).ok()?;
    Some(header.get("alg")?.as_str()?.to_owned())
}

/// `decode` with verify's validation, and what an accepted token must say.
fn check_decode(token: &str, key: &DecodingKey, alg: Algorithm) {
    let before = get_current_timestamp();
    let Ok(data) = jsonwebtoken::decode::<Value>(token, key, &validation(alg)) else {
        return;
    };
    let after = get_current_timestamp();
    let claims = &data.claims;
    let names = |claim: &str, want: &str| match claims.get(claim) {
        Some(Value::String(s)) => s == want,
        Some(Value::Array(all)) => all.iter().any(|v| v.as_str() == Some(want)),
        _ => false,
    };
    assert!(names("iss", ISSUER), "accepted iss: {claims}");
    assert!(names("aud", RESOURCE), "accepted aud: {claims}");
    // A NumericDate as jsonwebtoken reads it: a fraction is rounded.
    let time = |claim: &str| {
        let v = claims.get(claim)?;
        v.as_u64().or_else(|| v.as_f64().map(|f| f.round() as u64))
    };
    let exp = time("exp").expect("accepted without a numeric exp");
    assert!(
        exp.saturating_add(LEEWAY.as_secs()) >= before,
        "accepted expired: {claims}"
    );
    if let Some(nbf) = time("nbf") {
        assert!(
            nbf <= after + LEEWAY.as_secs(),
            "accepted before nbf: {claims}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    // An `Authorization` header that is not text never reaches `header_of`.
    let Ok(token) = std::str::from_utf8(data) else {
        return;
    };

    let header = header_of(token);
    let said = raw_alg(token);
    if let Some(alg) = &said
        && (alg.eq_ignore_ascii_case("none") || alg.to_ascii_uppercase().starts_with("HS"))
    {
        assert!(header.is_err(), "{alg} accepted: {header:?}");
    }
    if let Ok(header) = &header {
        assert!(ALLOWED_ALGORITHMS.contains(&header.alg), "{header:?}");
        assert!(!matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        ));
        if let Some(alg) = &said {
            let checked = serde_json::to_value(header.alg).expect("an Algorithm serializes");
            assert_eq!(
                checked.as_str(),
                Some(alg.as_str()),
                "checked another alg than sent"
            );
        }
        check_decode(token, &RSA_KEY, header.alg);
    }

    // The claims again, validly signed.
    let mut parts = token.split('.');
    if let (Some(_), Some(payload)) = (parts.next(), parts.next()) {
        let message = format!("{ED_HEADER}.{payload}");
        let (signer, verifier) = &*ED_KEY;
        let signature = jsonwebtoken::crypto::sign(message.as_bytes(), signer, Algorithm::EdDSA)
            .expect("Ed25519 signing");
        check_decode(
            &format!("{message}.{signature}"),
            verifier,
            Algorithm::EdDSA,
        );
    }
});
