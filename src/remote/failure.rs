//! What an object-store request's failure says: whether another try may succeed (transient) or
//! would only repeat the answer (permanent), and the HTTP status and message chain behind it.
//! The store wrapper (`store.rs`) retries transient failures within one budget per request.

/// Whether another try of a request that failed with `e` may succeed: an answer 5xx, 429 (slow
/// down) or 408, or no answer at all (a connection refused, reset or timed out, a body cut
/// short, a listing cut mid-way). Not: a missing object (404), a refused one (401, 403), a
/// taken create (409, 412), a range past the end (416), or any other answer about the request
/// itself, which another try would only repeat.
pub(crate) fn transient(e: &object_store::Error) -> bool {
    use object_store::Error as E;
    match e {
        E::NotFound { .. }
        | E::AlreadyExists { .. }
        | E::Precondition { .. }
        | E::NotModified { .. }
        | E::PermissionDenied { .. }
        | E::Unauthenticated { .. }
        | E::InvalidPath { .. }
        | E::NotSupported { .. }
        | E::NotImplemented { .. }
        | E::UnknownConfigurationKey { .. } => false,
        _ => http_status(&chain(e)).is_none_or(|s| s >= 500 || s == 429 || s == 408),
    }
}

/// An error and its sources, one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text = format!("{text}: {s_text}");
        }
        source = s.source();
    }
    text
}

/// The HTTP status an `object_store` error message reports, if any.
pub(crate) fn http_status(text: &str) -> Option<u16> {
    ["status code: ", "status: ", "Status { status: "]
        .iter()
        .find_map(|needle| {
            let at = text.find(needle)?;
            let digits: String = text
                .get(at + needle.len()..)?
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok().filter(|s| (100..600).contains(s))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_failures_are_told_from_permanent_ones() {
        let generic = |text: &str| object_store::Error::Generic {
            store: "S3",
            source: Box::new(std::io::Error::other(text.to_string())),
        };
        let status = |code: &str| {
            generic(&format!(
                "Error performing GET http://x in 1ms - Server returned non-2xx status code: \
                 {code}: "
            ))
        };
        for code in [
            "500 Internal Server Error",
            "503 Service Unavailable",
            "429 Too Many Requests",
            "408 Request Timeout",
        ] {
            assert!(transient(&status(code)), "{code}");
        }
        for code in [
            "400 Bad Request",
            "403 Forbidden",
            "416 Range Not Satisfiable",
        ] {
            assert!(!transient(&status(code)), "{code}");
        }
        // No answer: a reset, a timeout, a cut body.
        assert!(transient(&generic(
            "HTTP error: error sending request: connection error: Connection reset by peer"
        )));
        let not_found = object_store::Error::NotFound {
            path: "k".into(),
            source: Box::new(std::io::Error::other("404")),
        };
        assert!(!transient(&not_found));
        let denied = object_store::Error::PermissionDenied {
            path: "k".into(),
            source: Box::new(std::io::Error::other("500 in the text of a 403")),
        };
        assert!(!transient(&denied));
    }

    #[test]
    fn statuses_are_read_off_messages() {
        assert_eq!(
            http_status("Error performing GET http://x in 3ms - Server returned non-2xx status code: 503 Service Unavailable: "),
            Some(503)
        );
        // What object_store 0.14 says (through `chain`) for a GET answered 503 every time
        // until its retries ran out: the status line, then the S3 error body.
        assert_eq!(
            http_status(
                "Generic S3 error: Error performing GET http://127.0.0.1:44131/zrecord-test/sets/\
                 exp/data/chunk/00000.zr in 6.8ms, after 2 retries, max_retries: 2, \
                 retry_timeout: 30s  - Server returned non-2xx status code: 503 Service \
                 Unavailable: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>\
                 ServiceUnavailable</Code><Message>Service Unavailable</Message></Error>"
            ),
            Some(503)
        );
        assert_eq!(http_status("connection reset"), None);
        assert_eq!(
            http_status(
                "Generic S3 error: Error performing PUT http://127.0.0.1:1/b/k in 230µs - HTTP \
                 error: error sending request: client error (SendRequest): connection error: \
                 Connection reset by peer (os error 104)"
            ),
            None
        );
        assert_eq!(http_status("status code: 99999"), None);
    }
}
