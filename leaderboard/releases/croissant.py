"""Croissant metadata (MLCommons' JSON-LD format for ML data sets) for a release.

``croissant.json`` describes the same files as the card: one ``cr:FileObject`` per
Parquet file (its path in the folder, its sha256) and one ``cr:RecordSet`` per split
whose fields extract the file's columns, with their types. Croissant 1.0
(http://mlcommons.org/croissant/1.0), with the standard ``@context``; the tests
validate it with ``mlcroissant`` and read the records through it.
"""

from __future__ import annotations

import re

from .card import citation

CONFORMS_TO = "http://mlcommons.org/croissant/1.0"
CONTEXT = {
    "@language": "en",
    "@vocab": "https://schema.org/",
    "citeAs": "cr:citeAs",
    "column": "cr:column",
    "conformsTo": "dct:conformsTo",
    "cr": "http://mlcommons.org/croissant/",
    "rai": "http://mlcommons.org/croissant/RAI/",
    "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"},
    "dct": "http://purl.org/dc/terms/",
    "equivalentProperty": "cr:equivalentProperty",
    "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract",
    "field": "cr:field",
    "fileProperty": "cr:fileProperty",
    "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet",
    "format": "cr:format",
    "includes": "cr:includes",
    "isLiveDataset": "cr:isLiveDataset",
    "jsonPath": "cr:jsonPath",
    "key": "cr:key",
    "md5": "cr:md5",
    "parentField": "cr:parentField",
    "path": "cr:path",
    "recordSet": "cr:recordSet",
    "references": "cr:references",
    "regex": "cr:regex",
    "repeated": "cr:repeated",
    "replace": "cr:replace",
    "samplingRate": "cr:samplingRate",
    "sc": "https://schema.org/",
    "separator": "cr:separator",
    "source": "cr:source",
    "subField": "cr:subField",
    "transform": "cr:transform",
}
DATA_TYPES = {"text": "sc:Text", "int": "sc:Integer", "float": "sc:Float", "bool": "sc:Boolean",
              "text_list": "sc:Text"}
PARQUET = "application/x-parquet"


def _plain(value: str) -> str:
    """Text without markup (the metadata is read as plain text)."""
    return re.sub(r"[<>]", "", " ".join(str(value or "").split()))


def croissant(facts: dict, files: dict, *, url: str = "") -> dict:
    """The JSON-LD document for a release whose facts are ``facts`` (``card.card_facts``)
    and whose data files are ``files`` (path -> {"sha256", ...})."""
    task = facts["task"]
    rounds = ", ".join(str(n) for n in facts["rounds"])
    description = (f"{_plain(task['goal'])} Verified examples of round(s) {rounds} of the Dynabench task "
                   f"{task['slug']}, written by people to fool a target model and validated by others: "
                   f"{facts['counts']['rows']} examples.").strip()
    document = {
        "@context": CONTEXT,
        "@type": "sc:Dataset",
        "name": f"dynabench-{task['slug']}-v{facts['version']}",
        "description": description,
        "conformsTo": CONFORMS_TO,
        "version": f"{facts['version']}.0.0",
        "datePublished": facts["created_at"][:10],
        "license": facts["license_url"] or facts["license"],
        "inLanguage": facts["language"],
        "keywords": ["dynabench", "adversarial", task["task_type"]],
        "isLiveDataset": False,
        "citeAs": citation(facts),
        "distribution": [],
        "recordSet": [],
    }
    if url:
        document["url"] = url
    for split in facts["splits"]:
        path = f"data/{split}.parquet"
        file_id = f"{split}-parquet"
        document["distribution"].append({
            "@type": "cr:FileObject", "@id": file_id, "name": file_id,
            "description": f"The {split} split: one row per example.",
            "contentUrl": path, "encodingFormat": PARQUET, "sha256": files[path]["sha256"],
        })
        fields = []
        for column in facts["columns"]:
            field = {
                "@type": "cr:Field", "@id": f"{split}/{column['name']}", "name": column["name"],
                "description": _plain(column["description"]), "dataType": DATA_TYPES[column["kind"]],
                "source": {"fileObject": {"@id": file_id}, "extract": {"column": column["name"]}},
            }
            if column["kind"] == "text_list":
                field["repeated"] = True
            fields.append(field)
        document["recordSet"].append({
            "@type": "cr:RecordSet", "@id": split, "name": split,
            "description": f"{facts['counts']['splits'][split]['rows']} verified examples.",
            "key": {"@id": f"{split}/uid"},
            "field": fields,
        })
    return document
