"""The FOCUS 1.2 columns llmmeter writes, each with the spec's requirement level, type, nullability
and allowed values: the one place the export and its tests take them from.

Source: FOCUS 1.2 (FinOps Open Cost and Usage Specification, tag v1.2), section "Columns"
(specification/columns/<column>.md, "Content Constraints" and the column's normative list).
Every column that section marks Mandatory is here; the Conditional and Recommended ones are those
llmmeter can fill. Columns named x_... are llmmeter's own (the spec's prefix for custom columns).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Level = Literal["Mandatory", "Conditional", "Recommended", "Custom"]
DataType = Literal["Decimal", "String", "Date/Time", "JSON"]


@dataclass(frozen=True, slots=True)
class Column:
    name: str  # the spec's Column ID
    level: Level
    type: DataType
    nullable: bool  # the spec's "Allows nulls"
    allowed: tuple[str, ...] = ()  # the spec's allowed values; empty: any value of the type


# FOCUS 1.2 "Columns": ChargeCategory allowed values.
CHARGE_CATEGORIES = ("Usage", "Purchase", "Tax", "Credit", "Adjustment")
# FOCUS 1.2 "Columns": ServiceCategory allowed values.
SERVICE_CATEGORIES = (
    "AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases", "Developer Tools",
    "Multicloud", "Identity", "Integration", "Internet of Things", "Management and Governance", "Media",
    "Migration", "Mobile", "Networking", "Security", "Storage", "Web", "Other")
# FOCUS 1.2 "Columns": ServiceSubcategory allowed values under "AI and Machine Learning".
AI_SUBCATEGORIES = ("AI Platforms", "Bots", "Generative AI", "Machine Learning", "Natural Language Processing",
                    "Other (AI and Machine Learning)")

COLUMNS: tuple[Column, ...] = (
    # Mandatory in FOCUS 1.2.
    Column("BilledCost", "Mandatory", "Decimal", False),
    Column("BillingAccountId", "Mandatory", "String", False),
    Column("BillingAccountName", "Mandatory", "String", True),
    Column("BillingCurrency", "Mandatory", "String", False),  # ISO 4217
    Column("BillingPeriodEnd", "Mandatory", "Date/Time", False),
    Column("BillingPeriodStart", "Mandatory", "Date/Time", False),
    Column("ChargeCategory", "Mandatory", "String", False, CHARGE_CATEGORIES),
    Column("ChargeClass", "Mandatory", "String", True, ("Correction",)),
    Column("ChargeDescription", "Mandatory", "String", True),
    Column("ChargePeriodEnd", "Mandatory", "Date/Time", False),
    Column("ChargePeriodStart", "Mandatory", "Date/Time", False),
    Column("ContractedCost", "Mandatory", "Decimal", False),
    Column("EffectiveCost", "Mandatory", "Decimal", False),
    Column("InvoiceIssuerName", "Mandatory", "String", False),
    Column("ListCost", "Mandatory", "Decimal", False),
    Column("PricingQuantity", "Mandatory", "Decimal", True),
    Column("PricingUnit", "Mandatory", "String", True),
    Column("ProviderName", "Mandatory", "String", False),
    Column("PublisherName", "Mandatory", "String", False),
    Column("ServiceCategory", "Mandatory", "String", False, SERVICE_CATEGORIES),
    Column("ServiceName", "Mandatory", "String", False),
    # Conditional or Recommended in FOCUS 1.2, filled because llmmeter has the data.
    Column("ChargeFrequency", "Recommended", "String", False, ("One-Time", "Recurring", "Usage-Based")),
    Column("ConsumedQuantity", "Conditional", "Decimal", True),
    Column("ConsumedUnit", "Conditional", "String", True),
    Column("ListUnitPrice", "Conditional", "Decimal", True),
    Column("PricingCategory", "Conditional", "String", True, ("Standard", "Dynamic", "Committed", "Other")),
    Column("ServiceSubcategory", "Recommended", "String", False, AI_SUBCATEGORIES),
    Column("SkuId", "Conditional", "String", True),
    Column("SkuPriceId", "Conditional", "String", True),
    Column("SubAccountId", "Conditional", "String", True),
    Column("SubAccountName", "Conditional", "String", True),
    Column("Tags", "Conditional", "JSON", True),
    # llmmeter's own.
    Column("x_Model", "Custom", "String", False),
    Column("x_Tier", "Custom", "String", True),
    Column("x_TokenCategory", "Custom", "String", False),
    Column("x_PriceEffectiveFrom", "Custom", "Date/Time", True),
    Column("x_PriceBand", "Custom", "Decimal", True),
    Column("x_Unpriced", "Custom", "String", False, ("true", "false")),
)

NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
# Cells llmmeter writes itself (numbers, times, fixed words, JSON): never a client's text at the start.
NOT_TEXT = frozenset(c.name for c in COLUMNS if c.type != "String" or c.allowed) | {
    "BillingCurrency", "PricingUnit", "ConsumedUnit"}
