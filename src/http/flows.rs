//! The active flows as `/flows` shows them: the tracker's view copies ([`crate::tracker::views`])
//! turned into [`View`] records.

use crate::record::{ABSENT_U64, FlowId, Line, View};
use crate::tracker::Flow;
use crate::tracker::views::Order;

/// How a `/flows` request pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paging {
    /// Cookie order, every flow, the next page after the last cookie (`?after=`): stable
    /// while flows come and go.
    Cursor,
    /// An order of the host page's, or without idle flows: pages at offsets.
    Ordered {
        /// The order, largest first.
        order: Order,
        /// Idle flows listed too.
        idle: bool,
    },
}

impl Paging {
    /// From `?order=`, `?idle=`, `?after=` and `?offset=`. Err: a one-line message naming
    /// the bad value.
    pub fn of(
        order: Option<&str>,
        idle: Option<u8>,
        after: Option<u64>,
        offset: Option<usize>,
    ) -> Result<Self, super::BadRequest> {
        let bad = |msg: String| super::BadRequest(msg);
        let order = match order {
            None | Some("cookie") => Order::Cookie,
            Some("busy") => Order::Rate,
            Some(name) => Order::ALL.into_iter().find(|o| o.name() == name).ok_or_else(|| {
                bad(format!("invalid order {name:?}: cookie, busy (or rate), rtt, retrans or age"))
            })?,
        };
        let idle = match idle {
            None | Some(1) => true,
            Some(0) => false,
            Some(n) => return Err(bad(format!("invalid idle {n}: 0 or 1"))),
        };
        if order == Order::Cookie && idle {
            return match offset {
                Some(_) => Err(bad("offset pages an order (order=busy…); cookie order pages \
                                    with after=COOKIE"
                    .into())),
                None => Ok(Paging::Cursor),
            };
        }
        if after.is_some() {
            return Err(bad("after pages the cookie order of every flow; with order or idle=0, \
                            page with offset=N"
                .into()));
        }
        Ok(Paging::Ordered { order, idle })
    }
}

/// `&netns=NAME` for a next page's link, when a namespace was asked for.
pub fn netns_param(netns: Option<&str>) -> String {
    netns.map_or(String::new(), |n| format!("&netns={}", crate::units::url_escape(n)))
}

/// A `/flows` page at an offset.
#[derive(Debug, Clone, Copy)]
pub struct Ordered {
    /// The order.
    pub order: Order,
    /// Idle flows listed too.
    pub idle: bool,
    /// Flows before the page.
    pub offset: usize,
    /// Page size.
    pub limit: usize,
    /// Only this namespace's flows.
    pub netns: Option<u32>,
}

impl Ordered {
    /// The next page's `Link` header when `listed` flows are past this page.
    pub fn next(&self, listed: usize, netns: Option<&str>) -> Option<String> {
        let next = self.offset.saturating_add(self.limit);
        (next < listed).then(|| {
            let ns = netns_param(netns);
            format!(
                "</flows?order={}&idle={}&offset={next}&limit={}{ns}>; rel=\"next\"",
                self.order.name(),
                u8::from(self.idle),
                self.limit
            )
        })
    }
}

/// `f` (a view copy: its samples are the newest few, `stage.window` counts all) as JSON,
/// with its latest sample, and with those samples when `recent`.
/// `netns`: its namespace's name, when several are sampled.
/// `realtime_offset_ns`: CLOCK_REALTIME − CLOCK_MONOTONIC, for the samples' `UnixNs`.
pub fn view(
    f: &Flow,
    recent: bool,
    netns: Option<&str>,
    realtime_offset_ns: i128,
) -> serde_json::Value {
    let id = FlowId::new(&f.key, f.first_ts_ns);
    let (_, chrono) = f.chrono();
    let chrono_at = |i: usize| chrono.as_ref().map(|c| c[i]);
    let line =
        |i: usize, s| Line::new(f.key.cookie, f.seq, &id, s, chrono_at(i), realtime_offset_ns);
    let l = &f.last;
    let v = View {
        cookie: f.key.cookie,
        family: View::family_name(f.key.family),
        netns,
        id: &id,
        state: crate::states::name(l.state),
        cc: f.cc.as_str(),
        cgroup_id: (f.cgroup_id != 0).then_some(f.cgroup_id),
        seq: f.seq,
        partial_start: f.partial_start,
        samples: f.stage.window(),
        deduped: f.deduped,
        last_ts_ns: f.last_ts_ns,
        min_rtt_ms: (l.min_rtt_us != u32::MAX).then(|| f64::from(l.min_rtt_us) / 1000.0),
        total_retrans: l.total_retrans,
        bytes_acked: l.bytes_acked,
        bytes_received: l.bytes_received,
        bytes_sent: l.bytes_sent,
        bytes_retrans: l.bytes_retrans,
        max_pacing_mbps: (l.max_pacing_rate != ABSENT_U64)
            .then(|| l.max_pacing_rate as f64 * 8.0 / 1e6),
        latest: f.samples.last().map(|s| line(f.samples.len() - 1, s)),
        recent: recent.then(|| f.samples.iter().enumerate().map(|(i, s)| line(i, s)).collect()),
    };
    // Serialising numbers and strings into a Value cannot fail.
    serde_json::to_value(&v).unwrap_or(serde_json::Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paging_keeps_the_cookie_cursor_and_pages_an_order_by_offset() {
        assert_eq!(Paging::of(None, None, Some(7), None), Ok(Paging::Cursor));
        let busy = Paging::Ordered { order: Order::Rate, idle: true };
        assert_eq!(Paging::of(Some("busy"), None, None, Some(5)), Ok(busy));
        let quiet = Paging::Ordered { order: Order::Cookie, idle: false };
        assert_eq!(Paging::of(None, Some(0), None, None), Ok(quiet));
        for (o, i, a, off, word) in [
            (Some("fast"), None, None, None, "\"fast\""),
            (None, Some(2), None, None, "idle 2"),
            (Some("rtt"), None, Some(1), None, "after"),
            (None, None, None, Some(3), "offset"),
        ] {
            let e = Paging::of(o, i, a, off).unwrap_err().0;
            assert!(e.contains(word) && e.lines().count() == 1, "{e}");
        }
        let p = Ordered { order: Order::Rate, idle: false, offset: 0, limit: 2, netns: None };
        assert_eq!(p.next(2, None), None);
        assert_eq!(
            p.next(3, Some("a b")).unwrap(),
            "</flows?order=rate&idle=0&offset=2&limit=2&netns=a%20b>; rel=\"next\""
        );
    }
}
