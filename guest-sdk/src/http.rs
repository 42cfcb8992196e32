//! Outgoing HTTP requests through `wasi:http` (feature `http`).
//!
//! The host decides every request against the call's network grants: a
//! request it refuses fails with wasi:http's own error code, which
//! [`HttpFailure::code`] names as the WIT spells it (`HTTP-request-denied`,
//! `destination-IP-prohibited`, `DNS-error`, ...). Credentials are attached
//! by the host; a tool never sees them. A request that carried one must get
//! its response uncompressed (the host masks an echo of the secret in it):
//! a compressed one fails with `HTTP-response-content-coding`. A server
//! certificate that is not trusted fails with `TLS-certificate-error`.
//! Redirects are not followed.
//!
//! ```no_run
//! use toolhost_guest::http::{HttpRequest, send};
//! let r = send(&HttpRequest::get("https://api.example.com/v1/items"), 1 << 20);
//! ```

/// One request.
#[derive(Debug, Clone, Default)]
pub struct HttpRequest {
    /// `GET`, `POST`, ... (any token).
    pub method: String,
    /// An absolute `http://` or `https://` URL.
    pub url: String,
    /// Headers to send.
    pub headers: Vec<(String, String)>,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
}

impl HttpRequest {
    /// A `GET` of `url`.
    pub fn get(url: &str) -> HttpRequest {
        HttpRequest {
            method: "GET".to_string(),
            url: url.to_string(),
            ..HttpRequest::default()
        }
    }
}

/// A response.
#[derive(Debug, Clone, Default)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Every header, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, at most the limit given to [`send`].
    pub body: Vec<u8>,
    /// True when the body was longer than the limit and was cut.
    pub truncated: bool,
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpFailure {
    /// wasi:http's error code as WIT spells it (`HTTP-request-denied`), or
    /// `invalid-url` for a URL this module cannot send.
    pub code: String,
    /// Details.
    pub message: String,
}

impl std::fmt::Display for HttpFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for HttpFailure {}

/// `(scheme, authority, path with query)` of an absolute URL.
fn split_url(url: &str) -> Result<(&str, &str, &str), HttpFailure> {
    let bad = |m: &str| HttpFailure {
        code: "invalid-url".to_string(),
        message: format!("{url}: {m}"),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("not an absolute URL"))?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    let path = if path.is_empty() { "/" } else { path };
    Ok((scheme, authority, path))
}

/// Sends `request` and reads at most `max_body` bytes of the response body.
pub fn send(request: &HttpRequest, max_body: usize) -> Result<HttpResponse, HttpFailure> {
    let (scheme, authority, path) = split_url(&request.url)?;
    imp::send(request, scheme, authority, path, max_body)
}

/// wasi:http's `error-code` as an [`HttpFailure`]: the code named as the
/// WIT spells it, with a message that says what happened.
///
/// Compiled for the wasm target, where [`send`] uses it, and for the unit
/// tests on the host: wasi:http's bindings compile there too, and nothing
/// here calls into them.
#[cfg(any(target_os = "wasi", test))]
mod error_code {
    use super::HttpFailure;
    use wasip2::http::types::ErrorCode;

    /// The WIT name of an error code. Every case is named (the match has
    /// no catch-all, so a case a later WASI adds is named here too, or the
    /// build fails).
    pub(super) fn name_of(e: &ErrorCode) -> &'static str {
        match e {
            ErrorCode::DnsTimeout => "DNS-timeout",
            ErrorCode::DnsError(_) => "DNS-error",
            ErrorCode::DestinationNotFound => "destination-not-found",
            ErrorCode::DestinationUnavailable => "destination-unavailable",
            ErrorCode::DestinationIpProhibited => "destination-IP-prohibited",
            ErrorCode::DestinationIpUnroutable => "destination-IP-unroutable",
            ErrorCode::ConnectionRefused => "connection-refused",
            ErrorCode::ConnectionTerminated => "connection-terminated",
            ErrorCode::ConnectionTimeout => "connection-timeout",
            ErrorCode::ConnectionReadTimeout => "connection-read-timeout",
            ErrorCode::ConnectionWriteTimeout => "connection-write-timeout",
            ErrorCode::ConnectionLimitReached => "connection-limit-reached",
            ErrorCode::TlsProtocolError => "TLS-protocol-error",
            ErrorCode::TlsCertificateError => "TLS-certificate-error",
            ErrorCode::TlsAlertReceived(_) => "TLS-alert-received",
            ErrorCode::HttpRequestDenied => "HTTP-request-denied",
            ErrorCode::HttpRequestLengthRequired => "HTTP-request-length-required",
            ErrorCode::HttpRequestBodySize(_) => "HTTP-request-body-size",
            ErrorCode::HttpRequestMethodInvalid => "HTTP-request-method-invalid",
            ErrorCode::HttpRequestUriInvalid => "HTTP-request-URI-invalid",
            ErrorCode::HttpRequestUriTooLong => "HTTP-request-URI-too-long",
            ErrorCode::HttpRequestHeaderSectionSize(_) => "HTTP-request-header-section-size",
            ErrorCode::HttpRequestHeaderSize(_) => "HTTP-request-header-size",
            ErrorCode::HttpRequestTrailerSectionSize(_) => "HTTP-request-trailer-section-size",
            ErrorCode::HttpRequestTrailerSize(_) => "HTTP-request-trailer-size",
            ErrorCode::HttpResponseIncomplete => "HTTP-response-incomplete",
            ErrorCode::HttpResponseHeaderSectionSize(_) => "HTTP-response-header-section-size",
            ErrorCode::HttpResponseHeaderSize(_) => "HTTP-response-header-size",
            ErrorCode::HttpResponseBodySize(_) => "HTTP-response-body-size",
            ErrorCode::HttpResponseTrailerSectionSize(_) => "HTTP-response-trailer-section-size",
            ErrorCode::HttpResponseTrailerSize(_) => "HTTP-response-trailer-size",
            ErrorCode::HttpResponseTransferCoding(_) => "HTTP-response-transfer-coding",
            ErrorCode::HttpResponseContentCoding(_) => "HTTP-response-content-coding",
            ErrorCode::HttpResponseTimeout => "HTTP-response-timeout",
            ErrorCode::HttpUpgradeFailed => "HTTP-upgrade-failed",
            ErrorCode::HttpProtocolError => "HTTP-protocol-error",
            ErrorCode::LoopDetected => "loop-detected",
            ErrorCode::ConfigurationError => "configuration-error",
            ErrorCode::InternalError(_) => "internal-error",
        }
    }

    /// The failure `e` reports. The codes toolhost's host gives a meaning
    /// of its own say it; the others carry the code's payload.
    pub(super) fn failure_of(e: ErrorCode) -> HttpFailure {
        let message = match &e {
            // The host refuses a compressed response to a request that
            // carried a credential: an echo of the secret in it would be
            // hidden from the mask.
            ErrorCode::HttpResponseContentCoding(coding) => format!(
                "the response came compressed{} and was refused: the request carried a \
                 credential the host holds, and the response to such a request must be \
                 readable by the host's credential mask",
                coding
                    .as_deref()
                    .map(|c| format!(" with content-coding {c:?}"))
                    .unwrap_or_default()
            ),
            ErrorCode::TlsCertificateError => "the server's certificate was refused: no \
                 trusted root signs it, it is not valid now, or it is not for this host"
                .to_string(),
            other => format!("{other:?}"),
        };
        HttpFailure {
            code: name_of(&e).to_string(),
            message,
        }
    }
}

#[cfg(target_os = "wasi")]
mod imp {
    use super::error_code::{failure_of, name_of};
    use super::{HttpFailure, HttpRequest, HttpResponse};
    use wasip2::http::outgoing_handler;
    use wasip2::http::types::{
        Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
    };
    use wasip2::io::streams::StreamError;

    fn failure(code: &str, message: impl Into<String>) -> HttpFailure {
        HttpFailure {
            code: code.to_string(),
            message: message.into(),
        }
    }

    pub(super) fn send(
        request: &HttpRequest,
        scheme: &str,
        authority: &str,
        path: &str,
        max_body: usize,
    ) -> Result<HttpResponse, HttpFailure> {
        let mut entries: Vec<(String, Vec<u8>)> = request
            .headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.as_bytes().to_vec()))
            .collect();
        // A body goes with its length (not chunked), unless the caller set one.
        if let Some(body) = &request.body
            && !entries.iter().any(|(k, _)| k == "content-length")
        {
            entries.push(("content-length".into(), body.len().to_string().into_bytes()));
        }
        let headers =
            Fields::from_list(&entries).map_err(|e| failure("invalid-header", format!("{e:?}")))?;
        let req = OutgoingRequest::new(headers);
        let method = match request.method.to_ascii_uppercase().as_str() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            _ => Method::Other(request.method.clone()),
        };
        let bad = |what: &str| failure("invalid-url", format!("{what} refused by wasi:http"));
        req.set_method(&method).map_err(|()| bad("method"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            other => Scheme::Other(other.to_string()),
        };
        req.set_scheme(Some(&scheme)).map_err(|()| bad("scheme"))?;
        req.set_authority(Some(authority))
            .map_err(|()| bad("authority"))?;
        req.set_path_with_query(Some(path))
            .map_err(|()| bad("path"))?;
        // A request without a body asks for none (no body resource to make
        // and finish).
        let pending = match &request.body {
            None => outgoing_handler::handle(req, None).map_err(failure_of)?,
            Some(bytes) => {
                let body = req
                    .body()
                    .map_err(|()| failure("internal-error", "no request body"))?;
                let pending = outgoing_handler::handle(req, None).map_err(failure_of)?;
                let out = body
                    .write()
                    .map_err(|()| failure("internal-error", "no body stream"))?;
                for chunk in bytes.chunks(4096) {
                    if let Err(e) = out.blocking_write_and_flush(chunk) {
                        // The request failed; its error comes with the response.
                        let _ = e;
                        break;
                    }
                }
                drop(out);
                let _ = OutgoingBody::finish(body, None);
                pending
            }
        };
        pending.subscribe().block();
        let response = match pending.get() {
            Some(Ok(Ok(r))) => r,
            Some(Ok(Err(e))) => return Err(failure_of(e)),
            Some(Err(())) | None => return Err(failure("internal-error", "no response")),
        };
        let status = response.status();
        let headers = response.headers().entries();
        let incoming = response
            .consume()
            .map_err(|()| failure("internal-error", "no response body"))?;
        let (body, truncated) = read_body(&incoming, max_body)?;
        drop(incoming);
        Ok(HttpResponse {
            status,
            headers,
            body,
            truncated,
        })
    }

    fn read_body(incoming: &IncomingBody, max: usize) -> Result<(Vec<u8>, bool), HttpFailure> {
        let stream = incoming
            .stream()
            .map_err(|()| failure("internal-error", "no body stream"))?;
        let mut body = Vec::new();
        loop {
            if body.len() > max {
                body.truncate(max);
                return Ok((body, true));
            }
            let want = (max + 1 - body.len()).min(64 * 1024) as u64;
            match stream.blocking_read(want) {
                Ok(chunk) => body.extend_from_slice(&chunk),
                Err(StreamError::Closed) => return Ok((body, false)),
                Err(StreamError::LastOperationFailed(e)) => {
                    let detail = e.to_debug_string();
                    let code = wasip2::http::types::http_error_code(&e)
                        .map_or("body-error", |c| name_of(&c));
                    return Err(failure(code, detail));
                }
            }
        }
    }
}

#[cfg(not(target_os = "wasi"))]
mod imp {
    use super::{HttpFailure, HttpRequest, HttpResponse};

    pub(super) fn send(
        _: &HttpRequest,
        _: &str,
        _: &str,
        _: &str,
        _: usize,
    ) -> Result<HttpResponse, HttpFailure> {
        Err(HttpFailure {
            code: "unsupported".to_string(),
            message: "HTTP needs wasi:http (build for wasm32-wasip2)".to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests fail loudly on a set-up error")]
    use super::error_code::{failure_of, name_of};
    use super::{HttpFailure, split_url};
    use wasip2::http::types::{
        DnsErrorPayload, ErrorCode, FieldSizePayload, TlsAlertReceivedPayload,
    };

    /// A compressed response the host refused (the request carried a
    /// credential) is named for what it is and says why.
    #[test]
    fn a_refused_content_coding_is_named_and_says_why() {
        let f = failure_of(ErrorCode::HttpResponseContentCoding(Some(
            "gzip".to_string(),
        )));
        assert_eq!(
            f,
            HttpFailure {
                code: "HTTP-response-content-coding".to_string(),
                message: "the response came compressed with content-coding \"gzip\" and was \
                          refused: the request carried a credential the host holds, and the \
                          response to such a request must be readable by the host's \
                          credential mask"
                    .to_string(),
            }
        );
        assert!(
            f.to_string()
                .starts_with("HTTP-response-content-coding: the response came compressed with content-coding \"gzip\" and was refused"),
            "{f}"
        );
        let unnamed = failure_of(ErrorCode::HttpResponseContentCoding(None));
        assert_eq!(unnamed.code, "HTTP-response-content-coding");
        assert!(
            unnamed
                .message
                .starts_with("the response came compressed and was refused: "),
            "{unnamed}"
        );
    }

    /// An untrusted server certificate is a certificate error, not a TLS
    /// protocol error.
    #[test]
    fn an_untrusted_certificate_is_a_certificate_error() {
        let f = failure_of(ErrorCode::TlsCertificateError);
        assert_eq!(f.code, "TLS-certificate-error");
        assert!(
            f.message
                .starts_with("the server's certificate was refused"),
            "{f}"
        );
        assert_eq!(
            failure_of(ErrorCode::TlsProtocolError).code,
            "TLS-protocol-error"
        );
    }

    /// Every code is named as the WIT spells it (none is `other`), and the
    /// others keep their payload in the message.
    #[test]
    fn every_code_is_named_as_the_wit_spells_it() {
        let field = || FieldSizePayload {
            field_name: Some("x-big".to_string()),
            field_size: Some(9000),
        };
        let cases = [
            (ErrorCode::DnsTimeout, "DNS-timeout"),
            (
                ErrorCode::DnsError(DnsErrorPayload {
                    rcode: Some("NXDOMAIN".to_string()),
                    info_code: None,
                }),
                "DNS-error",
            ),
            (ErrorCode::DestinationNotFound, "destination-not-found"),
            (ErrorCode::DestinationUnavailable, "destination-unavailable"),
            (
                ErrorCode::DestinationIpProhibited,
                "destination-IP-prohibited",
            ),
            (
                ErrorCode::DestinationIpUnroutable,
                "destination-IP-unroutable",
            ),
            (ErrorCode::ConnectionRefused, "connection-refused"),
            (ErrorCode::ConnectionTerminated, "connection-terminated"),
            (ErrorCode::ConnectionTimeout, "connection-timeout"),
            (ErrorCode::ConnectionReadTimeout, "connection-read-timeout"),
            (
                ErrorCode::ConnectionWriteTimeout,
                "connection-write-timeout",
            ),
            (
                ErrorCode::ConnectionLimitReached,
                "connection-limit-reached",
            ),
            (ErrorCode::TlsProtocolError, "TLS-protocol-error"),
            (ErrorCode::TlsCertificateError, "TLS-certificate-error"),
            (
                ErrorCode::TlsAlertReceived(TlsAlertReceivedPayload {
                    alert_id: Some(40),
                    alert_message: None,
                }),
                "TLS-alert-received",
            ),
            (ErrorCode::HttpRequestDenied, "HTTP-request-denied"),
            (
                ErrorCode::HttpRequestLengthRequired,
                "HTTP-request-length-required",
            ),
            (
                ErrorCode::HttpRequestBodySize(Some(10)),
                "HTTP-request-body-size",
            ),
            (
                ErrorCode::HttpRequestMethodInvalid,
                "HTTP-request-method-invalid",
            ),
            (ErrorCode::HttpRequestUriInvalid, "HTTP-request-URI-invalid"),
            (
                ErrorCode::HttpRequestUriTooLong,
                "HTTP-request-URI-too-long",
            ),
            (
                ErrorCode::HttpRequestHeaderSectionSize(Some(1)),
                "HTTP-request-header-section-size",
            ),
            (
                ErrorCode::HttpRequestHeaderSize(Some(field())),
                "HTTP-request-header-size",
            ),
            (
                ErrorCode::HttpRequestTrailerSectionSize(None),
                "HTTP-request-trailer-section-size",
            ),
            (
                ErrorCode::HttpRequestTrailerSize(field()),
                "HTTP-request-trailer-size",
            ),
            (
                ErrorCode::HttpResponseIncomplete,
                "HTTP-response-incomplete",
            ),
            (
                ErrorCode::HttpResponseHeaderSectionSize(None),
                "HTTP-response-header-section-size",
            ),
            (
                ErrorCode::HttpResponseHeaderSize(field()),
                "HTTP-response-header-size",
            ),
            (
                ErrorCode::HttpResponseBodySize(Some(7)),
                "HTTP-response-body-size",
            ),
            (
                ErrorCode::HttpResponseTrailerSectionSize(Some(2)),
                "HTTP-response-trailer-section-size",
            ),
            (
                ErrorCode::HttpResponseTrailerSize(field()),
                "HTTP-response-trailer-size",
            ),
            (
                ErrorCode::HttpResponseTransferCoding(Some("chunked, gzip".to_string())),
                "HTTP-response-transfer-coding",
            ),
            (
                ErrorCode::HttpResponseContentCoding(Some("br".to_string())),
                "HTTP-response-content-coding",
            ),
            (ErrorCode::HttpResponseTimeout, "HTTP-response-timeout"),
            (ErrorCode::HttpUpgradeFailed, "HTTP-upgrade-failed"),
            (ErrorCode::HttpProtocolError, "HTTP-protocol-error"),
            (ErrorCode::LoopDetected, "loop-detected"),
            (ErrorCode::ConfigurationError, "configuration-error"),
            (
                ErrorCode::InternalError(Some("boom".to_string())),
                "internal-error",
            ),
        ];
        for (e, name) in cases {
            assert_eq!(name_of(&e), name, "{e:?}");
            let debug = format!("{e:?}");
            let f = failure_of(e);
            assert_eq!(f.code, name, "{debug}");
            if !matches!(
                name,
                "HTTP-response-content-coding" | "TLS-certificate-error"
            ) {
                assert_eq!(f.message, debug);
            }
        }
    }

    #[test]
    fn urls_split_into_scheme_authority_path() {
        assert_eq!(
            split_url("http://127.0.0.1:8080/a?b=1").unwrap(),
            ("http", "127.0.0.1:8080", "/a?b=1")
        );
        assert_eq!(split_url("https://h").unwrap(), ("https", "h", "/"));
        assert_eq!(split_url("https://h?x").unwrap(), ("https", "h", "?x"));
        assert!(split_url("h/x").is_err());
        assert!(split_url("http:///x").is_err());
    }
}
