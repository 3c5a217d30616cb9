//! The X.509 and PKCS#7 times the kernel takes (`x509_decode_time`, used for a
//! certificate's validity and a PKCS#7 signing time): a UTCTime, or a GeneralizedTime
//! for a year outside 1950 to 2049 (RFC 5280 4.1.2.5: those years are UTCTime's; the
//! kernel refuses a GeneralizedTime for them, EBADMSG), from 1970 on. `der` decodes both
//! kinds for any year, so this rule is kept here over its decoded value.
//!
//! Current limits: `der` refuses the two forms the kernel also takes, `24:00:00`
//! (midnight of the next day) and a 60th second; a time with either is refused here
//! before this rule is asked (stricter than the kernel; no signing tool writes them).

use x509_cert::time::Time;

/// A time the kernel refuses: a GeneralizedTime for `year`, which UTCTime must say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a GeneralizedTime in {year} (the kernel's x509_decode_time takes UTCTime for 1950 to \
     2049 only)"
)]
pub struct TimeError {
    pub year: u16,
}

/// The time as seconds since the epoch, or why the kernel refuses it.
pub fn kernel_time(t: &Time) -> Result<u64, TimeError> {
    if let Time::GeneralTime(g) = t {
        let year = g.to_date_time().year();
        if (1950..=2049).contains(&year) {
            return Err(TimeError { year });
        }
    }
    Ok(t.to_unix_duration().as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use der::Decode;

    fn time(tag: u8, text: &str) -> Time {
        let mut der = vec![tag, u8::try_from(text.len()).unwrap()];
        der.extend_from_slice(text.as_bytes());
        Time::from_der(&der).unwrap()
    }

    /// UTCTime for any year it can hold, GeneralizedTime only outside 1950 to 2049.
    #[test]
    fn generalized_time_only_where_utc_time_cannot_say_it() {
        assert_eq!(kernel_time(&time(0x17, "700101000001Z")), Ok(1));
        assert_eq!(kernel_time(&time(0x17, "491231235959Z")), Ok(2_524_607_999));
        for refused in ["20200907184321Z", "19700101000000Z", "20491231235959Z"] {
            let e = kernel_time(&time(0x18, refused)).unwrap_err();
            assert!(e.to_string().contains("x509_decode_time"), "{refused}: {e}");
        }
        assert_eq!(
            kernel_time(&time(0x18, "20500101000000Z")),
            Ok(2_524_608_000)
        );
    }
}
