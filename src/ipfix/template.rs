//! The information elements a record is exported as, and the templates that list them
//! (RFC 7011 §3.4). Element numbers and meanings are in docs/ipfix.md; the ones under
//! `--ipfix-pen` are ours to number, the others are IANA's and ntop's.

/// ntop's private enterprise number: nProbe's and ntopng's TCP elements.
pub const NTOP_PEN: u32 = 35632;

/// An element's length in a template that says "variable length" (RFC 7011 §7).
pub const VARIABLE: u16 = 65535;

/// What a data record holds, field by field. Each knows its element (id, enterprise,
/// length) and the encoder knows how to fill it from a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// sourceIPv4Address (8).
    SrcV4,
    /// destinationIPv4Address (12).
    DstV4,
    /// sourceIPv6Address (27).
    SrcV6,
    /// destinationIPv6Address (28).
    DstV6,
    /// sourceTransportPort (7).
    SrcPort,
    /// destinationTransportPort (11).
    DstPort,
    /// protocolIdentifier (4): 6.
    Protocol,
    /// flowDirection (61): 0 ingress (the remote end sent), 1 egress (this host sent).
    Direction,
    /// flowStartMilliseconds (152).
    StartMs,
    /// flowEndMilliseconds (153).
    EndMs,
    /// octetDeltaCount (1): TCP payload bytes (see docs/ipfix.md).
    Octets,
    /// packetDeltaCount (2): segments.
    Packets,
    /// flowEndReason (136).
    EndReason,
    /// ntop CLIENT_NW_LATENCY_MS (35632.123).
    ClientLatencyMs,
    /// ntop SERVER_NW_LATENCY_MS (35632.124).
    ServerLatencyMs,
    /// ntop RETRANSMITTED_IN_PKTS (35632.109): retransmits src → dst, in an egress record.
    RetransSrcToDst,
    /// ntop RETRANSMITTED_OUT_PKTS (35632.110): retransmits dst → src, in an ingress record.
    RetransDstToSrc,
    /// Ours (`--ipfix-pen`), by number in [`OURS`].
    Ours(Own),
}

/// The elements under the user's enterprise number, numbered as docs/ipfix.md lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Own {
    /// 1, string: the record's `Verdict`.
    Verdict,
    /// 2, string: its `Cause`, or `none`.
    Cause,
    /// 3, unsigned32: `MinRTTKernelms` in µs (else the observed minimum; 0 when neither).
    MinRttUs,
    /// 4, unsigned32: retransmits this record covers (`TotalRetransmits`' change).
    Retransmits,
    /// 5, string: `Comm`, or `unknown`.
    Program,
    /// 6, string: `DestService`, or `unknown`.
    Destination,
    /// 7, string: `Service`, or `unknown`.
    Service,
    /// 8, unsigned32: `Pid`, 0 when not found.
    Pid,
    /// 9, unsigned32: `SynRetransmits`.
    SynRetransmits,
    /// 10–16, unsigned32: `RTTSummary`'s seven numbers in µs (0 when absent).
    Rtt(u8),
}

/// Our elements in their numbering order (the element id is the index + 1).
pub const OURS: [Own; 16] = [
    Own::Verdict,
    Own::Cause,
    Own::MinRttUs,
    Own::Retransmits,
    Own::Program,
    Own::Destination,
    Own::Service,
    Own::Pid,
    Own::SynRetransmits,
    Own::Rtt(0),
    Own::Rtt(1),
    Own::Rtt(2),
    Own::Rtt(3),
    Own::Rtt(4),
    Own::Rtt(5),
    Own::Rtt(6),
];

/// Our elements' names, as the shipped collector configs name them, in [`OURS`]' order.
pub const OUR_NAMES: [&str; 16] = [
    "cgmonVerdict",
    "cgmonCause",
    "cgmonMinRttMicroseconds",
    "cgmonRetransmits",
    "cgmonProgram",
    "cgmonDestination",
    "cgmonService",
    "cgmonPid",
    "cgmonSynRetransmits",
    "cgmonRttP02Microseconds",
    "cgmonRttP09Microseconds",
    "cgmonRttP25Microseconds",
    "cgmonRttP50Microseconds",
    "cgmonRttP75Microseconds",
    "cgmonRttP91Microseconds",
    "cgmonRttP98Microseconds",
];

impl Own {
    /// The element id under the user's enterprise number.
    pub fn id(self) -> u16 {
        match self {
            Own::Rtt(i) => 10 + u16::from(i),
            o => OURS.iter().position(|x| *x == o).map_or(0, |i| i as u16 + 1),
        }
    }

    /// Whether it is a string (variable length) rather than an unsigned32.
    pub fn is_string(self) -> bool {
        matches!(self, Own::Verdict | Own::Cause | Own::Program | Own::Destination | Own::Service)
    }
}

impl Field {
    /// (element id, enterprise number, length in the template; `pen`: the user's).
    pub fn element(self, pen: u32) -> (u16, Option<u32>, u16) {
        match self {
            Field::SrcV4 => (8, None, 4),
            Field::DstV4 => (12, None, 4),
            Field::SrcV6 => (27, None, 16),
            Field::DstV6 => (28, None, 16),
            Field::SrcPort => (7, None, 2),
            Field::DstPort => (11, None, 2),
            Field::Protocol => (4, None, 1),
            Field::Direction => (61, None, 1),
            Field::StartMs => (152, None, 8),
            Field::EndMs => (153, None, 8),
            Field::Octets => (1, None, 8),
            Field::Packets => (2, None, 8),
            Field::EndReason => (136, None, 1),
            Field::ClientLatencyMs => (123, Some(NTOP_PEN), 4),
            Field::ServerLatencyMs => (124, Some(NTOP_PEN), 4),
            Field::RetransSrcToDst => (109, Some(NTOP_PEN), 4),
            Field::RetransDstToSrc => (110, Some(NTOP_PEN), 4),
            Field::Ours(o) => (o.id(), Some(pen), if o.is_string() { VARIABLE } else { 4 }),
        }
    }
}

/// Which way a data record's bytes went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// This host sent them: source is the record's local end.
    Egress,
    /// The remote end sent them: source is the remote end.
    Ingress,
}

/// The four templates: IPv4 or IPv6, egress or ingress. Their ids are 256–259.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// IPv6 addresses (a v4-mapped one is exported as IPv4).
    pub v6: bool,
    /// The direction.
    pub way: Way,
}

impl Shape {
    /// Every template, in id order.
    pub const ALL: [Shape; 4] = [
        Shape { v6: false, way: Way::Egress },
        Shape { v6: false, way: Way::Ingress },
        Shape { v6: true, way: Way::Egress },
        Shape { v6: true, way: Way::Ingress },
    ];

    /// Its template id.
    pub fn id(self) -> u16 {
        256 + 2 * u16::from(self.v6) + u16::from(self.way == Way::Ingress)
    }

    /// Its fields, in order: ours only with an enterprise number (`with_ours`).
    pub fn fields(self, with_ours: bool) -> Vec<Field> {
        let (src, dst) =
            if self.v6 { (Field::SrcV6, Field::DstV6) } else { (Field::SrcV4, Field::DstV4) };
        let retrans = match self.way {
            Way::Egress => Field::RetransSrcToDst,
            Way::Ingress => Field::RetransDstToSrc,
        };
        let mut f = vec![
            src,
            dst,
            Field::SrcPort,
            Field::DstPort,
            Field::Protocol,
            Field::Direction,
            Field::StartMs,
            Field::EndMs,
            Field::Octets,
            Field::Packets,
            Field::EndReason,
            Field::ClientLatencyMs,
            Field::ServerLatencyMs,
            retrans,
        ];
        if with_ours {
            f.extend(OURS.iter().map(|o| Field::Ours(*o)));
        }
        f
    }
}

/// Appends a template set holding every template (RFC 7011 §3.4.1) to `out`.
pub fn template_set(out: &mut Vec<u8>, pen: Option<u32>) {
    let start = out.len();
    out.extend_from_slice(&2u16.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    for shape in Shape::ALL {
        let fields = shape.fields(pen.is_some());
        out.extend_from_slice(&shape.id().to_be_bytes());
        out.extend_from_slice(&(fields.len() as u16).to_be_bytes());
        for f in fields {
            let (id, enterprise, len) = f.element(pen.unwrap_or(0));
            match enterprise {
                Some(e) => {
                    out.extend_from_slice(&(id | 0x8000).to_be_bytes());
                    out.extend_from_slice(&len.to_be_bytes());
                    out.extend_from_slice(&e.to_be_bytes());
                }
                None => {
                    out.extend_from_slice(&id.to_be_bytes());
                    out.extend_from_slice(&len.to_be_bytes());
                }
            }
        }
    }
    let len = (out.len() - start) as u16;
    out[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
}
