"""What can be reported: module types, data-entry types, their units and the keys that
classify an entry (and pick its emission factor).

The catalogue is code, not data: a new data-entry type needs a migration of the
choices anyway, and the CSV schemas, the API's validation and the recalculation all
read it from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models


class ModuleType(models.TextChoices):
    TRAVEL = "travel", "Travel"
    ENERGY = "energy", "Energy"
    PURCHASES = "purchases", "Purchases"


class DataEntryType(models.TextChoices):
    PLANE = "plane", "Plane trips"
    TRAIN = "train", "Train trips"
    CAR = "car", "Car trips"
    ELECTRICITY = "electricity", "Electricity"
    HEATING = "heating", "Heating"
    GOODS = "goods", "Purchased goods"
    SERVICES = "services", "Purchased services"


@dataclass(frozen=True)
class EntryTypeSpec:
    """One data-entry type: its module, its unit of measure and its classification keys,
    with one valid code per key (``example``, in key order) for the upload form's example."""

    type: str
    module_type: str
    unit: str
    keys: tuple[str, ...]
    help: str
    example: tuple[str, ...]


SPECS: dict[str, EntryTypeSpec] = {
    spec.type: spec
    for spec in (
        EntryTypeSpec(
            DataEntryType.PLANE,
            ModuleType.TRAVEL,
            "km",
            ("haul", "cabin"),
            "haul: short, medium or long; cabin: economy, business or first",
            ("short", "economy"),
        ),
        EntryTypeSpec(
            DataEntryType.TRAIN,
            ModuleType.TRAVEL,
            "km",
            ("network",),
            "network: urban, national or international",
            ("national",),
        ),
        EntryTypeSpec(
            DataEntryType.CAR,
            ModuleType.TRAVEL,
            "km",
            ("fuel",),
            "fuel: petrol, diesel, hybrid or electric",
            ("petrol",),
        ),
        EntryTypeSpec(
            DataEntryType.ELECTRICITY,
            ModuleType.ENERGY,
            "kwh",
            ("country",),
            "country: ISO 3166 code of the grid (fr, de, ch …)",
            ("fr",),
        ),
        EntryTypeSpec(
            DataEntryType.HEATING,
            ModuleType.ENERGY,
            "kwh",
            ("energy",),
            "energy: natural_gas, fuel_oil, district_heating or wood_pellets",
            ("natural_gas",),
        ),
        EntryTypeSpec(
            DataEntryType.GOODS,
            ModuleType.PURCHASES,
            "eur",
            ("category",),
            "category: it_equipment, furniture, lab_supplies, paper …",
            ("it_equipment",),
        ),
        EntryTypeSpec(
            DataEntryType.SERVICES,
            ModuleType.PURCHASES,
            "eur",
            ("category",),
            "category: consulting, cleaning, catering, software …",
            ("consulting",),
        ),
    )
}


def spec(data_entry_type: str) -> EntryTypeSpec:
    """The spec of a data-entry type; KeyError names the valid ones."""
    try:
        return SPECS[data_entry_type]
    except KeyError:
        raise KeyError(
            f"unknown data-entry type {data_entry_type!r}; use one of {', '.join(SPECS)}"
        ) from None


def types_of(module_type: str) -> list[str]:
    return [s.type for s in SPECS.values() if s.module_type == module_type]
