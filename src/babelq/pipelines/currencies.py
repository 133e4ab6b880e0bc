"""ISO 4217 alphabetic codes a payment may be in (active currencies, funds codes excluded),
and each one's minor unit.

The ``enum`` of the transfer schema's ``currency`` (:mod:`babelq.pipelines.transfer_schema`), so
ingest (``currency_unknown``) and settle accept the same codes. A fixed list rather than a lookup:
ingest must reject an unknown code before publishing, and a payment in a mistyped currency is a
compliance incident, not a formatting nit.

Amounts travel as integers of the currency's minor unit (``amount_cents``); how many decimals
that unit has is ISO 4217's, not always two: JPY has none and KWD three. A report that printed
every amount with two decimals would show a yen payment a hundred times too small.
"""

from __future__ import annotations

_CODES = """
    AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BRL BSD BTN BWP
    BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP
    GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR
    KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK
    MXN MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR
    SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS
    UAH UGX USD UYU UZS VES VND VUV WST XAF XCD XOF XPF YER ZAR ZMW ZWL
"""
ISO_4217: frozenset[str] = frozenset(_CODES.split())

#: ISO 4217's minor unit of the codes above whose unit is not 2 decimals.
_NO_DECIMALS = "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX VND VUV XAF XOF XPF"
_THREE_DECIMALS = "BHD IQD JOD KWD LYD OMR TND"
_NOT_TWO_DECIMALS: dict[str, int] = {
    **{code: 0 for code in _NO_DECIMALS.split()},
    **{code: 3 for code in _THREE_DECIMALS.split()},
}


def minor_units(code: str) -> int | None:
    """How many decimals the minor unit of ``code`` has (2 for most), None for a code not in ISO 4217."""
    if code not in ISO_4217:
        return None
    return _NOT_TWO_DECIMALS.get(code, 2)
