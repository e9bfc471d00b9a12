//! Money as the ledger sees it: integer minor units and ISO 4217 currency codes.

use std::fmt;

/// A strictly positive amount in minor units (cents for USD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AmountMinor(i64);

impl AmountMinor {
    /// The largest amount the gateway accepts: 10^15 minor units. Far above any real payment,
    /// and low enough that sums of many of them stay exact in 64 bits.
    pub const MAX: i64 = 1_000_000_000_000_000;

    /// Accepts amounts above zero and at most [`Self::MAX`].
    pub fn parse(value: i64) -> Option<Self> {
        (value > 0 && value <= Self::MAX).then_some(Self(value))
    }

    pub fn get(self) -> i64 {
        self.0
    }
}

/// An active ISO 4217 currency code, upper case. One byte, its place in [`ISO_4217`]: a
/// settlement holds one per item of a million-line report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency(u8);

// Active ISO 4217 codes (2024 list, without funds and precious-metal codes).
const ISO_4217: &[&str] = &[
    "AED", "AFN", "ALL", "AMD", "ANG", "AOA", "ARS", "AUD", "AWG", "AZN", "BAM", "BBD", "BDT",
    "BGN", "BHD", "BIF", "BMD", "BND", "BOB", "BRL", "BSD", "BTN", "BWP", "BYN", "BZD", "CAD",
    "CDF", "CHF", "CLP", "CNY", "COP", "CRC", "CUP", "CVE", "CZK", "DJF", "DKK", "DOP", "DZD",
    "EGP", "ERN", "ETB", "EUR", "FJD", "FKP", "GBP", "GEL", "GHS", "GIP", "GMD", "GNF", "GTQ",
    "GYD", "HKD", "HNL", "HTG", "HUF", "IDR", "ILS", "INR", "IQD", "IRR", "ISK", "JMD", "JOD",
    "JPY", "KES", "KGS", "KHR", "KMF", "KPW", "KRW", "KWD", "KYD", "KZT", "LAK", "LBP", "LKR",
    "LRD", "LSL", "LYD", "MAD", "MDL", "MGA", "MKD", "MMK", "MNT", "MOP", "MRU", "MUR", "MVR",
    "MWK", "MXN", "MYR", "MZN", "NAD", "NGN", "NIO", "NOK", "NPR", "NZD", "OMR", "PAB", "PEN",
    "PGK", "PHP", "PKR", "PLN", "PYG", "QAR", "RON", "RSD", "RUB", "RWF", "SAR", "SBD", "SCR",
    "SDG", "SEK", "SGD", "SHP", "SLE", "SOS", "SRD", "SSP", "STN", "SVC", "SYP", "SZL", "THB",
    "TJS", "TMT", "TND", "TOP", "TRY", "TTD", "TWD", "TZS", "UAH", "UGX", "USD", "UYU", "UZS",
    "VES", "VND", "VUV", "WST", "XAF", "XCD", "XOF", "XPF", "YER", "ZAR", "ZMW", "ZWG",
];

impl Currency {
    /// Accepts an upper-case active ISO 4217 code.
    pub fn parse(code: &str) -> Option<Self> {
        ISO_4217
            .iter()
            .position(|c| *c == code)
            .and_then(|at| u8::try_from(at).ok())
            .map(Self)
    }

    /// Accepts a code in any case, as Stripe sends them (`usd`).
    pub fn parse_any_case(code: &str) -> Option<Self> {
        Self::parse(&code.to_ascii_uppercase())
    }

    pub fn code(self) -> &'static str {
        ISO_4217[usize::from(self.0)]
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The currency's ISO 4217 exponent (its number of decimals: 2 for USD, 0 for JPY, 3 for BHD),
/// from the `iso_currency` crate; `None` for a code with no minor unit defined.
pub fn exponent(currency: Currency) -> Option<u32> {
    iso_currency::Currency::from_code(currency.code())?
        .exponent()
        .map(u32::from)
}

/// `amount_minor` in major units with the currency's ISO 4217 exponent, as finance reads it
/// (1999 USD is "19.99", 1999 JPY is "1999", -5 BHD is "-0.005"); exact, no floating point.
/// `None` for a code ISO 4217 does not know, or one with no minor unit defined.
pub fn major_units(amount_minor: i128, currency: &str) -> Option<String> {
    let exponent = u32::from(iso_currency::Currency::from_code(currency)?.exponent()?);
    if exponent == 0 {
        return Some(amount_minor.to_string());
    }
    let scale = 10u128.checked_pow(exponent)?;
    let sign = if amount_minor < 0 { "-" } else { "" };
    let magnitude = amount_minor.unsigned_abs();
    Some(format!(
        "{sign}{}.{:0width$}",
        magnitude / scale,
        magnitude % scale,
        width = exponent as usize
    ))
}

/// A signed decimal in major units (`"-12.50"`, `"1000"`) as minor units with `currency`'s
/// ISO 4217 exponent: the inverse of [`major_units`], exact, no floating point. Zeros beyond
/// the exponent change no value; any other digit there, a malformed number, a currency with no
/// minor unit, or a size above [`AmountMinor::MAX`] is an error saying which.
pub fn minor_units(decimal: &str, currency: Currency) -> Result<i64, String> {
    let (negative, unsigned) = match decimal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, decimal),
    };
    let (whole, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(fraction) || unsigned.ends_with('.') {
        return Err(format!("{decimal:?} is not a decimal such as \"-12.50\""));
    }
    let exponent = exponent(currency)
        .ok_or_else(|| format!("{currency} has no minor unit in ISO 4217"))?
        as usize;
    let fraction = fraction.trim_end_matches('0');
    if fraction.len() > exponent {
        return Err(format!(
            "{decimal:?} has more decimals than {currency}'s {exponent}"
        ));
    }
    let text = format!("{whole}{fraction:0<exponent$}");
    let magnitude = text
        .trim_start_matches('0')
        .parse::<i64>()
        .ok()
        .or_else(|| text.bytes().all(|b| b == b'0').then_some(0))
        .filter(|m| *m <= AmountMinor::MAX)
        .ok_or_else(|| format!("{decimal:?} is above {} minor units", AmountMinor::MAX))?;
    Ok(if negative { -magnitude } else { magnitude })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_one_byte_and_reads_back() {
        for code in ISO_4217 {
            assert_eq!(Currency::parse(code).map(Currency::code), Some(*code));
        }
        assert_eq!(Currency::parse("usd"), None);
        assert_eq!(std::mem::size_of::<Currency>(), 1);
    }

    #[test]
    fn decimals_become_minor_units_exactly_or_say_why_not() {
        let usd = Currency::parse("USD").unwrap();
        let jpy = Currency::parse("JPY").unwrap();
        for (text, currency, minor) in [
            ("19.99", usd, 1999),
            ("-12.5", usd, -1250),
            ("0.00", usd, 0),
            ("1000", jpy, 1000),
            ("1000.00", jpy, 1000),
            ("-0.05", usd, -5),
        ] {
            assert_eq!(minor_units(text, currency), Ok(minor), "{text}");
        }
        for (text, currency) in [
            ("19.999", usd),
            ("1.5", jpy),
            ("", usd),
            ("1,00", usd),
            ("1.", usd),
            ("+1", usd),
            ("1e3", usd),
            ("99999999999999999999", usd),
        ] {
            assert!(minor_units(text, currency).is_err(), "{text}");
        }
    }

    #[test]
    fn major_units_use_the_iso_exponent_exactly() {
        assert_eq!(major_units(1999, "USD").as_deref(), Some("19.99"));
        assert_eq!(major_units(5, "EUR").as_deref(), Some("0.05"));
        assert_eq!(major_units(-1999, "USD").as_deref(), Some("-19.99"));
        assert_eq!(major_units(1999, "JPY").as_deref(), Some("1999"));
        assert_eq!(major_units(-5, "BHD").as_deref(), Some("-0.005"));
        assert_eq!(
            major_units(i128::from(i64::MAX) * 3, "USD").as_deref(),
            Some("276701161105643274.21")
        );
        assert_eq!(major_units(1999, "XYZ"), None);
    }

    #[test]
    fn exponents_come_from_iso_4217() {
        let exponent_of = |code| Currency::parse(code).and_then(exponent);
        assert_eq!(exponent_of("USD"), Some(2));
        assert_eq!(exponent_of("JPY"), Some(0));
        assert_eq!(exponent_of("BHD"), Some(3));
        assert_eq!(exponent_of("CLP"), Some(0));
    }

    #[test]
    fn zero_and_negative_amounts_are_rejected() {
        assert_eq!(AmountMinor::parse(0), None);
        assert_eq!(AmountMinor::parse(-5), None);
        assert_eq!(AmountMinor::parse(1999).map(AmountMinor::get), Some(1999));
    }

    #[test]
    fn amounts_above_ten_to_the_fifteen_are_out_of_range() {
        assert!(AmountMinor::parse(AmountMinor::MAX).is_some());
        assert_eq!(AmountMinor::parse(AmountMinor::MAX + 1), None);
        assert_eq!(AmountMinor::parse(i64::MAX), None);
    }

    #[test]
    fn only_known_upper_case_codes_are_currencies() {
        assert_eq!(Currency::parse("USD").map(Currency::code), Some("USD"));
        assert_eq!(Currency::parse("usd"), None);
        assert_eq!(Currency::parse("XXX"), None);
        assert_eq!(
            Currency::parse_any_case("eur").map(Currency::code),
            Some("EUR")
        );
    }
}
