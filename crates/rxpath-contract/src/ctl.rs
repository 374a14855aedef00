//! The control socket's messages (`rxpath ctl` and the process it asks:
//! `rxpath run`, `rxpath echo`, a program under `rxpath exec`): one line
//! per request, one reply. `show` lists every knob, `get NAME` its value,
//! `set NAME VALUE` changes it (`ok`); anything else, and a refused
//! change, is `error: ...` with nothing changed.

/// The longest reply a client reads (`show` lists a few knobs).
pub const REPLY_MAX: usize = 64 << 10;

/// A request, one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Every knob and its value.
    Show,
    /// One knob's value.
    Get(String),
    /// Change a knob.
    Set(String, u64),
}

impl Request {
    /// The request `line` says; the error is the reply it gets.
    pub fn parse(line: &str) -> Result<Request, Reply> {
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["show"] => Ok(Request::Show),
            ["get", n] => Ok(Request::Get(n.to_string())),
            ["set", n, v] => match v.parse() {
                Ok(v) => Ok(Request::Set(n.to_string(), v)),
                Err(_) => Err(Reply::Error(format!("{}: '{v}' is not a number", short(n)))),
            },
            _ => Err(Reply::Error("show | get NAME | set NAME VALUE".into())),
        }
    }

    /// As sent, without its newline.
    pub fn line(&self) -> String {
        match self {
            Request::Show => "show".into(),
            Request::Get(n) => format!("get {n}"),
            Request::Set(n, v) => format!("set {n} {v}"),
        }
    }
}

/// A knob's name without `net.core.`, which may be left out.
pub fn short(n: &str) -> &str {
    n.strip_prefix("net.core.").unwrap_or(n)
}

/// A reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// To `show`: every knob and its value, in order.
    Knobs(Vec<(String, u64)>),
    /// To `get`: the value.
    Value(u64),
    /// To `set`: done.
    Done,
    /// Refused, nothing changed.
    Error(String),
}

impl Reply {
    /// As sent, without its last newline.
    pub fn text(&self) -> String {
        match self {
            Reply::Knobs(k) => k
                .iter()
                .map(|(n, v)| format!("{n} {v}"))
                .collect::<Vec<_>>()
                .join("\n"),
            Reply::Value(v) => v.to_string(),
            Reply::Done => "ok".into(),
            Reply::Error(e) => format!("error: {e}"),
        }
    }

    /// The reply `text` (its trailing newline trimmed) gives to `req`;
    /// `Err` when it is not what the protocol answers (not an rxpath
    /// control socket).
    pub fn parse(req: &Request, text: &str) -> Result<Reply, String> {
        if let Some(e) = text.strip_prefix("error: ") {
            if !e.contains('\n') {
                return Ok(Reply::Error(e.to_string()));
            }
        }
        let name = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '.')
        };
        match req {
            Request::Show => text
                .split('\n')
                .map(|l| match l.split(' ').collect::<Vec<_>>()[..] {
                    [n, v] if name(n) => v.parse().map(|v| (n.to_string(), v)).ok(),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()
                .map(Reply::Knobs)
                .ok_or_else(|| "the answer to show is not lines of NAME VALUE".into()),
            Request::Get(_) => text
                .parse()
                .map(Reply::Value)
                .map_err(|_| "the answer to get is not a number".into()),
            Request::Set(..) if text == "ok" => Ok(Reply::Done),
            Request::Set(..) => Err("the answer to set is not ok".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_read_back_as_written() {
        for r in [
            Request::Show,
            Request::Get("busy_poll".into()),
            Request::Set("net.core.busy_read".into(), 50),
        ] {
            assert_eq!(Request::parse(&r.line()), Ok(r));
        }
        let knobs = Reply::Knobs(vec![
            ("busy_poll".into(), 0),
            ("gro_flush_timeout".into(), 7),
        ]);
        assert_eq!(Reply::parse(&Request::Show, &knobs.text()), Ok(knobs));
        let get = Request::Get("x".into());
        assert_eq!(Reply::parse(&get, "12"), Ok(Reply::Value(12)));
        assert_eq!(
            Reply::parse(&get, "error: no knob named x"),
            Ok(Reply::Error("no knob named x".into()))
        );
        let set = Request::Set("x".into(), 1);
        assert_eq!(Reply::parse(&set, "ok"), Ok(Reply::Done));
        for bad in [
            "",
            "ok",
            "a b c",
            "net.core.netdev_budget -1",
            "x 1\n",
            "HTTP/1.1 200 OK",
        ] {
            assert!(Reply::parse(&Request::Show, bad).is_err(), "show {bad:?}");
        }
        for bad in ["", "ok", "1 2", "300\n301", "-1"] {
            assert!(Reply::parse(&get, bad).is_err(), "get {bad:?}");
        }
        for bad in ["", "OK", "42", "ok\nok"] {
            assert!(Reply::parse(&set, bad).is_err(), "set {bad:?}");
        }
    }

    #[test]
    fn a_bad_request_is_answered_with_why() {
        assert_eq!(
            Request::parse("set net.core.busy_read lots"),
            Err(Reply::Error("busy_read: 'lots' is not a number".into()))
        );
        assert!(matches!(Request::parse("reboot"), Err(Reply::Error(_))));
    }
}
