//! What the auth layers read from clients: htpasswd files (an operator's),
//! Basic credentials, token scopes and bearer tokens. A bearer token the
//! registry did not sign (any bytes, or a token it signed then changed)
//! is refused; one it signed is accepted with what it granted.
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use axum::http::HeaderValue;
use libfuzzer_sys::fuzz_target;
use sealvol_registry::auth::Htpasswd;
use sealvol_registry::http::layers::basic_credentials;
use sealvol_registry::auth::tokens::{parse_scope, Issuer};

#[derive(Arbitrary, Debug)]
enum Input<'a> {
    Htpasswd(&'a str),
    Basic(&'a [u8]),
    Scope(&'a str),
    /// Raw bytes as a bearer token.
    Bearer(&'a str),
    /// A token the registry signed for `scopes`, with byte `at` changed.
    Tampered {
        scopes: Vec<String>,
        at: usize,
        byte: u8,
    },
    Session(&'a str),
}

/// The system clock's seconds: jsonwebtoken checks a token's times
/// against it, whatever `verify` is told.
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn issuer() -> &'static Issuer {
    static ISSUER: OnceLock<Issuer> = OnceLock::new();
    ISSUER.get_or_init(|| {
        Issuer::new(
            b"fuzzing key of thirty-two bytes!",
            "registry.example".into(),
            "https://registry.example/token".into(),
            300,
        )
    })
}

fuzz_target!(|input: Input| match input {
    Input::Htpasswd(text) => {
        let _ = Htpasswd::parse(text);
    }
    Input::Basic(bytes) => {
        if let Ok(v) = HeaderValue::from_bytes(bytes) {
            if let Ok((user, _password)) = basic_credentials(&v) {
                assert!(!user.contains(':'), "the user ends at the first colon");
            }
        }
    }
    Input::Scope(s) => {
        if let Some((kind, name, actions)) = parse_scope(s) {
            assert!(!kind.contains(':'));
            assert!(!name.is_empty() && name.len() <= 512);
            assert!(actions.iter().all(|a| !a.is_empty() && !a.contains(',')));
        }
    }
    Input::Bearer(token) => {
        assert!(issuer().verify(token, now()).is_none(), "forged {token:?}");
        assert!(issuer().verify_session(token).is_none(), "forged {token:?}");
    }
    Input::Tampered { scopes, at, byte } => {
        let policy = sealvol_registry::auth::policy::Policy::loopback();
        let subject = sealvol_registry::auth::policy::Subject::User("fuzz".into());
        let Ok(answer) = issuer().issue(&policy, &subject, &scopes, now()) else {
            return;
        };
        let token = answer.token;
        assert!(issuer().verify(&token, now()).is_some(), "its own token");
        let mut bytes = token.clone().into_bytes();
        let at = at % bytes.len();
        if bytes[at] == byte {
            return;
        }
        bytes[at] = byte;
        if let Ok(changed) = String::from_utf8(bytes) {
            assert!(
                issuer().verify(&changed, now()).is_none(),
                "{token:?} changed to {changed:?} verified"
            );
        }
    }
    Input::Session(token) => {
        assert!(issuer().verify_session(token).is_none(), "forged {token:?}");
    }
});
