//! How the catalogue's table (`series.rs`) builds each entry: counters, gauges, histograms,
//! their units and labels.

use super::{Kind, Read, Section, Series, Unit};
use crate::metrics::{Histogram, Metrics};

/// A plain series: a counter or gauge read by `get`.
const fn plain(
    kind: Kind,
    section: Section,
    name: &'static str,
    says: &'static str,
    help: &'static str,
    get: fn(&Metrics) -> u64,
) -> Series {
    Series {
        name,
        help,
        label: None,
        kind,
        unit: Unit::Count,
        section,
        says,
        read: Read::Value(get),
    }
}

/// A counter of events.
pub(super) const fn counter(
    section: Section,
    name: &'static str,
    says: &'static str,
    help: &'static str,
    get: fn(&Metrics) -> u64,
) -> Series {
    plain(Kind::Counter, section, name, says, help, get)
}

/// A gauge of a count.
pub(super) const fn gauge(
    section: Section,
    name: &'static str,
    says: &'static str,
    help: &'static str,
    get: fn(&Metrics) -> u64,
) -> Series {
    plain(Kind::Gauge, section, name, says, help, get)
}

/// A series in another unit than a count.
pub(super) const fn in_unit(unit: Unit, s: Series) -> Series {
    Series { unit, ..s }
}

/// One member of a labelled family.
pub(super) const fn labelled(label: (&'static str, &'static str), s: Series) -> Series {
    Series { label: Some(label), ..s }
}

/// A histogram, in seconds.
pub(super) const fn histogram(
    section: Section,
    name: &'static str,
    says: &'static str,
    help: &'static str,
    get: fn(&Metrics) -> &Histogram,
) -> Series {
    Series {
        name,
        help,
        label: None,
        kind: Kind::Histogram,
        unit: Unit::Nanos,
        section,
        says,
        read: Read::Histogram(get),
    }
}
