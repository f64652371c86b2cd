//! [`Expr`] → `INET_DIAG_REQ_BYTECODE`.
//!
//! The kernel's filter machine (net/ipv4/inet_diag.c) runs ops of the form
//! `struct inet_diag_bc_op { u8 code; u8 yes; u16 no; }`: on a match it moves forward `yes`
//! bytes, otherwise `no` bytes; landing exactly on the end accepts, 4 bytes past it rejects.
//! The kernel's audit walks the `yes` chain, so every `yes` must step to the next op, and
//! every `no` must land on an op on that chain (or on accept/reject). Branching "on match"
//! therefore needs a following `JMP` (which always takes `no`).
//!
//! We compile with symbolic labels: `emit_expr(e, t, f)` emits code that reaches `t` when `e`
//! holds and `f` when it does not, where either may be "fall through". A final pass lays the
//! ops out and resolves labels to byte offsets. For cgmon's port lists this yields exactly
//! cgmon's bytes (tested below against docs/cgmon.md).

pub(crate) use crate::wire::inet_diag::bytecode as op;

use super::{Expr, Prefix, Side, audit};

/// A program the kernel could not take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The program exceeds what a jump offset (u16) or an attribute (u16 length) can span.
    #[error("filter is too large: {0} bytes of bytecode (at most 65,000)")]
    TooLong(usize),
    /// Our output failed our replica of the kernel's audit: a compiler bug, reported rather
    /// than sent to earn an EINVAL.
    #[error("compiled filter fails the kernel's audit: {0}")]
    Audit(#[from] audit::AuditError),
}

const MAX_LEN: usize = 65_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Next,
    Label(usize),
}

const ACCEPT: usize = 0;
const REJECT: usize = 1;

struct Op {
    code: u8,
    data: Vec<u8>,
    no: usize, // label id; JMP and conditions both use it
}

#[derive(Default)]
struct Asm {
    ops: Vec<Op>,
    /// label id → index of the op it precedes (`ops.len()` = the end).
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn new_label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn bind(&mut self, label: usize) {
        self.labels[label] = Some(self.ops.len());
    }

    fn push(&mut self, code: u8, data: Vec<u8>, no: usize) {
        self.ops.push(Op { code, data, no });
    }

    /// A single test: on match go to `t`, otherwise to `f`.
    fn test(&mut self, code: u8, data: Vec<u8>, t: Target, f: Target) {
        match (t, f) {
            (Target::Next, Target::Next) => {}
            (Target::Next, Target::Label(f)) => self.push(code, data, f),
            (Target::Label(t), Target::Next) => {
                let skip = self.new_label();
                self.push(code, data, skip);
                self.push(op::JMP, Vec::new(), t);
                self.bind(skip);
            }
            (Target::Label(t), Target::Label(f)) => {
                self.push(code, data, f);
                self.push(op::JMP, Vec::new(), t);
            }
        }
    }

    fn jump(&mut self, t: Target) {
        if let Target::Label(t) = t {
            self.push(op::JMP, Vec::new(), t);
        }
    }

    fn port_test(&mut self, code: u8, port: u16, t: Target, f: Target) {
        // The data op: {code 0, yes 0, no = port}.
        let mut data = vec![0, 0];
        data.extend_from_slice(&port.to_ne_bytes());
        self.test(code, data, t, f);
    }

    fn emit_expr(&mut self, e: &Expr, t: Target, f: Target) {
        match e {
            Expr::Port { side, lo, hi } => {
                let (eq, ge, le) = match side {
                    Side::Local => (op::S_EQ, op::S_GE, op::S_LE),
                    Side::Remote => (op::D_EQ, op::D_GE, op::D_LE),
                };
                match (*lo, *hi) {
                    (lo, hi) if lo == hi => self.port_test(eq, lo, t, f),
                    (0, u16::MAX) => self.jump(t),
                    (0, hi) => self.port_test(le, hi, t, f),
                    (lo, u16::MAX) => self.port_test(ge, lo, t, f),
                    (lo, hi) => {
                        let (f2, end) = self.label_for(f);
                        self.port_test(ge, lo, Target::Next, f2);
                        self.port_test(le, hi, t, f);
                        self.bind_opt(end);
                    }
                }
            }
            Expr::Addr { side, prefix } => {
                let code = match side {
                    Side::Local => op::S_COND,
                    Side::Remote => op::D_COND,
                };
                self.test(code, hostcond(prefix), t, f);
            }
            Expr::And(a, b) => {
                let (f2, end) = self.label_for(f);
                self.emit_expr(a, Target::Next, f2);
                self.emit_expr(b, t, f);
                self.bind_opt(end);
            }
            Expr::Or(a, b) => {
                let (t2, end) = self.label_for(t);
                let try_b = self.new_label();
                self.emit_expr(a, t2, Target::Label(try_b));
                self.bind(try_b);
                self.emit_expr(b, t, f);
                self.bind_opt(end);
            }
            Expr::Not(a) => self.emit_expr(a, f, t),
        }
    }

    /// `target` as a label, making one for "fall through" that the caller binds afterwards.
    fn label_for(&mut self, target: Target) -> (Target, Option<usize>) {
        match target {
            Target::Label(_) => (target, None),
            Target::Next => {
                let l = self.new_label();
                (Target::Label(l), Some(l))
            }
        }
    }

    fn bind_opt(&mut self, label: Option<usize>) {
        if let Some(l) = label {
            self.bind(l);
        }
    }

    fn layout(self) -> Result<Vec<u8>, CompileError> {
        let mut offsets = Vec::with_capacity(self.ops.len() + 1);
        let mut pos = 0usize;
        for o in &self.ops {
            offsets.push(pos);
            pos += 4 + o.data.len();
        }
        offsets.push(pos);
        let total = pos;
        if total > MAX_LEN {
            return Err(CompileError::TooLong(total));
        }
        let label_offset = |l: usize| match l {
            ACCEPT => total,
            REJECT => total + 4,
            _ => offsets[self.labels[l].expect("every label is bound")],
        };
        let mut out = Vec::with_capacity(total);
        for (i, o) in self.ops.iter().enumerate() {
            let yes = 4 + o.data.len();
            let no = label_offset(o.no) - offsets[i];
            out.push(o.code);
            out.push(u8::try_from(yes).expect("an op with its data is at most 28 bytes"));
            out.extend_from_slice(&u16::try_from(no).expect("total checked above").to_ne_bytes());
            out.extend_from_slice(&o.data);
        }
        Ok(out)
    }
}

/// `struct inet_diag_hostcond { u8 family; u8 prefix_len; int port; __be32 addr[]; }`, with
/// port -1 meaning any port.
fn hostcond(p: &Prefix) -> Vec<u8> {
    let mut d = vec![p.family, p.len, 0, 0];
    d.extend_from_slice(&(-1i32).to_ne_bytes());
    d.extend_from_slice(&p.addr[..p.addr_len()]);
    d
}

/// Compiles `e` to bytecode the kernel accepts, checked against our replica of its audit.
///
/// # Errors
/// A program over 65,000 bytes, or (a bug) one that fails the audit.
pub fn compile(e: &Expr) -> Result<Vec<u8>, CompileError> {
    let mut asm = Asm::default();
    let accept = asm.new_label();
    let reject = asm.new_label();
    debug_assert_eq!((accept, reject), (ACCEPT, REJECT));
    asm.emit_expr(e, Target::Next, Target::Label(REJECT));
    let bc = asm.layout()?;
    audit(&bc)?;
    Ok(bc)
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::filter::parse;

    /// docs/cgmon.md: `-netlink-dport 5201` gives `0c 08 0c 00 00 00 51 14`.
    #[test]
    fn cgmon_single_dport_golden() {
        let e = Expr::from_port_lists("", "5201").unwrap().unwrap();
        assert_eq!(compile(&e).unwrap(), [0x0c, 0x08, 0x0c, 0x00, 0x00, 0x00, 0x51, 0x14]);
    }

    /// docs/cgmon.md, the 56-byte example, op by op.
    #[test]
    fn cgmon_two_list_golden() {
        let e = Expr::from_port_lists("80,443", "2000-3000,45000-55000").unwrap().unwrap();
        let bc = compile(&e).unwrap();
        let ops: Vec<(u8, u8, u16)> =
            bc.chunks(4).map(|c| (c[0], c[1], u16::from_ne_bytes([c[2], c[3]]))).collect();
        let expect = [
            (op::S_EQ, 8, 12),
            (0, 0, 80),
            (op::JMP, 4, 12),
            (op::S_EQ, 8, 48),
            (0, 0, 443),
            (op::D_GE, 8, 20),
            (0, 0, 2000),
            (op::D_LE, 8, 12),
            (0, 0, 3000),
            (op::JMP, 4, 20),
            (op::D_GE, 8, 20),
            (0, 0, 45000),
            (op::D_LE, 8, 12),
            (0, 0, 55000),
        ];
        assert_eq!(ops, expect);
    }

    #[test]
    fn hostcond_layout() {
        let bc = compile(&parse("dst 192.0.2.0/24").unwrap()).unwrap();
        assert_eq!(
            bc,
            [
                op::D_COND,
                16,
                20,
                0, // op: yes = 4 + 12, no = reject (16 + 4)
                2,
                24,
                0,
                0, // AF_INET, /24, padding
                0xff,
                0xff,
                0xff,
                0xff, // port -1: any
                192,
                0,
                2,
                0, // address
            ]
        );
    }

    #[test]
    fn too_long_is_an_error() {
        let items: Vec<_> =
            (1..=6000u16).map(|p| Expr::Port { side: Side::Local, lo: p, hi: p }).collect();
        let e = Expr::any_of(items).unwrap();
        assert!(matches!(compile(&e), Err(CompileError::TooLong(_))));
    }
}
