//! A replica of the kernel's `inet_diag_bc_audit` (net/ipv4/inet_diag.c), so that a program
//! the kernel would refuse with a bare EINVAL is caught here with a message that says why.

use crate::wire::inet_diag::bytecode as op;

/// Why the kernel would reject a program.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    /// An opcode the kernel does not know (or one we never emit and do not audit).
    #[error("unknown opcode {code} at byte {at}")]
    UnknownOp {
        /// The code.
        code: u8,
        /// Its offset.
        at: usize,
    },
    /// An op whose operands run past the end.
    #[error("op at byte {at} is truncated")]
    Truncated {
        /// Its offset.
        at: usize,
    },
    /// A host condition with a bad family or prefix length.
    #[error("bad host condition at byte {at}")]
    BadHostcond {
        /// Its offset.
        at: usize,
    },
    /// A `yes` or `no` offset that is short, unaligned, too far, or lands between ops.
    #[error("bad jump at byte {at}: {why}")]
    BadJump {
        /// Offset of the op.
        at: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// The `yes` chain does not end exactly at the end.
    #[error("program does not end on an op boundary")]
    BadEnd,
}

fn u16_at(bc: &[u8], at: usize) -> usize {
    usize::from(u16::from_ne_bytes([bc[at], bc[at + 1]]))
}

/// Is an op reachable along the `yes` chain at `cc` bytes before the end (`valid_cc`)?
fn valid_cc(bc: &[u8], cc: usize) -> bool {
    let mut len = bc.len();
    let mut pos = 0;
    loop {
        if cc > len {
            return false;
        }
        if cc == len {
            return true;
        }
        let yes = usize::from(bc[pos + 1]);
        if yes < 4 || !yes.is_multiple_of(4) || yes > len {
            return false;
        }
        len -= yes;
        pos += yes;
    }
}

/// Checks a program as the kernel does before it runs it.
///
/// # Errors
/// The first problem found, with its byte offset.
pub fn audit(bc: &[u8]) -> Result<(), AuditError> {
    if !bc.len().is_multiple_of(4) {
        return Err(AuditError::BadEnd);
    }
    let mut pos = 0usize;
    while pos < bc.len() {
        let len = bc.len() - pos;
        let code = bc[pos];
        let mut min_len = 4usize;
        match code {
            op::S_COND | op::D_COND => {
                // 4-byte op + 8-byte hostcond + address.
                if len < 12 {
                    return Err(AuditError::Truncated { at: pos });
                }
                let (family, prefix_len) = (bc[pos + 4], bc[pos + 5]);
                let addr_len = match family {
                    0 => 0,
                    2 => 4,
                    10 => 16,
                    _ => return Err(AuditError::BadHostcond { at: pos }),
                };
                min_len += 8 + addr_len;
                if len < min_len {
                    return Err(AuditError::Truncated { at: pos });
                }
                if usize::from(prefix_len) > 8 * addr_len {
                    return Err(AuditError::BadHostcond { at: pos });
                }
            }
            op::S_GE | op::S_LE | op::D_GE | op::D_LE | op::S_EQ | op::D_EQ => {
                min_len += 4;
                if len < min_len {
                    return Err(AuditError::Truncated { at: pos });
                }
            }
            op::AUTO | op::JMP | op::NOP => {}
            _ => return Err(AuditError::UnknownOp { code, at: pos }),
        }
        let yes = usize::from(bc[pos + 1]);
        let no = u16_at(bc, pos + 2);
        if code != op::NOP {
            if no < min_len || no > len + 4 || !no.is_multiple_of(4) {
                return Err(AuditError::BadJump { at: pos, why: "no offset out of range" });
            }
            if no < len && !valid_cc(bc, len - no) {
                return Err(AuditError::BadJump { at: pos, why: "no offset lands between ops" });
            }
        }
        if yes < min_len || yes > len + 4 || !yes.is_multiple_of(4) {
            return Err(AuditError::BadJump { at: pos, why: "yes offset out of range" });
        }
        if yes > len {
            return Err(AuditError::BadEnd);
        }
        pos += yes;
    }
    Ok(())
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_the_kernel_refuses() {
        // A port test without its data op.
        assert_eq!(audit(&[op::S_EQ, 8, 12, 0]), Err(AuditError::Truncated { at: 0 }));
        // `no` that lands in the middle of the data op.
        assert!(matches!(
            audit(&[op::S_EQ, 8, 4, 0, 0, 0, 80, 0]),
            Err(AuditError::BadJump { .. })
        ));
        // yes = 0 would loop forever.
        assert!(matches!(audit(&[op::JMP, 0, 4, 0]), Err(AuditError::BadJump { .. })));
        // Unknown opcode.
        assert_eq!(audit(&[99, 4, 8, 0]), Err(AuditError::UnknownOp { code: 99, at: 0 }));
        // IPv4 prefix longer than 32.
        let bc = [op::S_COND, 16, 20, 0, 2, 33, 0, 0, 255, 255, 255, 255, 127, 0, 0, 1];
        assert_eq!(audit(&bc), Err(AuditError::BadHostcond { at: 0 }));
        // A valid one: S_EQ 80, reject otherwise.
        assert_eq!(audit(&[op::S_EQ, 8, 12, 0, 0, 0, 80, 0]), Ok(()));
    }
}
