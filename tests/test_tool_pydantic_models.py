"""@tool with pydantic models, as pydantic users write tools: a model parameter (nested,
recursive, with aliases, validators and ``extra="forbid"``, inside a list or an optional) is
its own JSON Schema under ``$defs``, the body receives the validated model instance, a bad call
fails naming the model and the field, and a returned model is its JSON data."""

from __future__ import annotations

import datetime
import enum
import json
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import pytest
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    HttpUrl,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass

from dsh_tools import (
    ExecuteBatch,
    ExecuteCall,
    ToolCall,
    ToolsConfig,
    ToolSystem,
    to_openai_tools,
    tool,
)
from dsh_tools.registry import thaw


class Address(BaseModel):
    city: str
    zip_code: str | None = Field(default=None, alias="zipCode")


class Person(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, description="Full name.")
    age: int = Field(ge=0)
    address: Address | None = None
    friends: list[Person] = []

    @field_validator("name")
    @classmethod
    def _capitalized(cls, value: str) -> str:
        if not value[:1].isupper():
            raise ValueError("must start with a capital letter")
        return value


class Card(BaseModel):
    title: str
    people: int


@tool
def introduce(person: Person, extra: list[Address] | None = None) -> Card:
    """Introduce someone.

    Args:
        person: Who.
        extra: Other places.
    """
    assert isinstance(person, Person)
    assert all(isinstance(friend, Person) for friend in person.friends)
    city = person.address.city if person.address else "nowhere"
    return Card(title=f"{person.name} from {city}", people=1 + len(person.friends))


@pytest.fixture
def system() -> Iterator[ToolSystem]:
    with ToolSystem.start(ToolsConfig(mode="both")) as started:
        started.tools.register(introduce)
        yield started


def _call(system: ToolSystem, arguments: dict[str, Any]) -> Any:
    return system.execute(ExecuteCall(call_id="c1", name="introduce", arguments=arguments))


def test_a_model_parameter_is_its_own_schema_under_defs() -> None:
    schema = thaw(introduce.parameters)
    assert schema["properties"]["person"] == {"description": "Who.", "$ref": "#/$defs/Person"}
    person = schema["$defs"]["Person"]
    assert person["additionalProperties"] is False
    assert person["required"] == ["name", "age"]
    assert person["properties"]["name"]["minLength"] == 1
    assert person["properties"]["friends"]["items"] == {"$ref": "#/$defs/Person"}
    assert "zipCode" in schema["$defs"]["Address"]["properties"]
    assert thaw(introduce.output.schema)["properties"]["people"] == {
        "title": "People",
        "type": "integer",
    }


def test_a_model_argument_arrives_validated_and_a_returned_model_is_its_data(
    system: ToolSystem,
) -> None:
    person = {
        "name": "Ada",
        "age": 36,
        "address": {"city": "London", "zipCode": "N1"},
        "friends": [{"name": "Charles", "age": 40}],
    }
    result = _call(system, {"person": person})
    assert not result.is_error, result.content
    assert result.value == {"title": "Ada from London", "people": 2}


def test_a_bad_model_argument_fails_naming_the_model_and_the_field(system: ToolSystem) -> None:
    lowercase = _call(system, {"person": {"name": "ada", "age": 1}})
    assert lowercase.is_error
    assert lowercase.error.message == (
        "invalid arguments: Person: Value error, must start with a capital letter at `name`"
        " - at `arguments.person`"
    )
    unknown = _call(system, {"person": {"name": "Ada", "age": 1, "email": "a@b"}})
    assert unknown.is_error
    assert "Extra inputs are not permitted at `email`" in unknown.error.message
    deep = _call(system, {"person": {"name": "Ada", "age": 1, "friends": [{"name": "B"}]}})
    assert deep.is_error
    assert "Field required at `friends.0.age`" in deep.error.message


def test_a_model_argument_wrong_in_several_fields_names_each_of_them(system: ToolSystem) -> None:
    # A model that is told only the first mistake corrects one field per turn.
    wrong = {"name": "", "age": -1, "address": {"zipCode": 7}}
    result = _call(system, {"person": wrong})
    assert result.is_error
    assert result.error.message == (
        "invalid arguments: Person: String should have at least 1 character at `name`;"
        " Input should be greater than or equal to 0 at `age`;"
        " Field required at `address.city`;"
        " Input should be a valid string at `address.zipCode` - at `arguments.person`"
    )


def test_a_model_argument_wrong_in_many_places_names_the_first_ten(system: ToolSystem) -> None:
    friends = [{"name": "Bo"} for _ in range(12)]
    result = _call(system, {"person": {"name": "Ada", "age": 1, "friends": friends}})
    assert result.is_error
    message = result.error.message
    assert message.count("Field required at `friends.") == 10
    assert "Field required at `friends.9.age` (and 2 more) - at `arguments.person`" in message


def test_strict_mode_nulls_for_a_models_optional_fields_are_absent(system: ToolSystem) -> None:
    (exported,) = to_openai_tools(
        [{"name": "introduce", "description": "", "parameters": introduce.parameters}],
        strict=True,
    )
    assert exported["function"]["strict"] is True
    person = {"name": "Ada", "age": 36, "address": None, "friends": None}
    text = json.dumps({"person": person, "extra": None})
    outcome = system.execute_batch(ExecuteBatch(calls=[ToolCall("c1", "introduce", text)]))
    (result,) = outcome.results
    assert not result.is_error, result.content
    assert result.value == {"title": "Ada from nowhere", "people": 1}


def test_code_mode_calls_a_model_tool(system: ToolSystem) -> None:
    program = 'card = await tools.introduce({"person": {"name": "Ada", "age": 3}})\nreturn card'
    result = system.execute(
        ExecuteCall(
            call_id="c2", name="run_code", arguments={"code": program, "description": "Intro"}
        )
    )
    assert not result.is_error, result.content
    assert '"title": "Ada from nowhere"' in result.content[0]["text"]


class Cat(BaseModel):
    kind: Literal["cat"] = "cat"
    lives: int = Field(default=9, ge=0)


class Dog(BaseModel):
    kind: Literal["dog"] = "dog"
    good: bool = True


@tool
def adopt(
    pet: Annotated[Cat | Dog, Field(discriminator="kind")], others: list[Cat | Dog] | None = None
) -> Cat | Dog:
    """Adopt a pet."""
    assert all(isinstance(other, Cat | Dog) for other in others or [])
    return pet


def test_a_union_of_models_is_validated_by_pydantic_discriminator_included(
    system: ToolSystem,
) -> None:
    schema = thaw(adopt.parameters)
    assert schema["properties"]["pet"]["discriminator"]["propertyName"] == "kind"
    assert schema["properties"]["others"]["anyOf"][0]["items"] == {
        "anyOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]
    }
    assert set(schema["$defs"]) == {"Cat", "Dog"}
    system.tools.register(adopt)
    dog = system.execute(
        ExecuteCall(
            call_id="c1",
            name="adopt",
            arguments={"pet": {"kind": "dog"}, "others": [{"kind": "cat", "lives": 1}]},
        )
    )
    assert not dog.is_error, dog.content
    assert dog.value == {"kind": "dog", "good": True}
    cow = system.execute(
        ExecuteCall(call_id="c2", name="adopt", arguments={"pet": {"kind": "cow"}})
    )
    assert cow.is_error
    assert cow.error.message.startswith("invalid arguments: CatOrDog: Input tag 'cow'")
    assert cow.error.message.endswith("- at `arguments.pet`")


@pydantic_dataclass
class Window:
    width: int = Field(default=80, ge=1)
    title: str = ""

    @field_validator("title")
    @classmethod
    def _stripped(cls, value: str) -> str:
        return value.strip()


def test_a_pydantic_dataclass_and_pydantics_own_types_are_validated_by_pydantic(
    system: ToolSystem,
) -> None:
    @tool
    def open_page(url: HttpUrl, window: Window | None = None) -> HttpUrl:
        """Open a page."""
        assert isinstance(url, HttpUrl)
        assert window is None or window.title == window.title.strip()
        return url

    properties = thaw(open_page.parameters)["properties"]
    assert properties["url"]["format"] == "uri"
    system.tools.register(open_page)
    page = {"url": "https://example.org/a", "window": {"title": "  Docs  "}}
    opened = system.execute(ExecuteCall(call_id="c1", name="open_page", arguments=page))
    assert not opened.is_error, opened.content
    assert opened.value == "https://example.org/a"
    narrow = {"url": "https://example.org", "window": {"width": 0}}
    refused = system.execute(ExecuteCall(call_id="c2", name="open_page", arguments=narrow))
    assert refused.is_error
    assert "Window: Input should be greater than or equal to 1 at `width`" in (
        refused.error.message
    )
    not_a_url = system.execute(
        ExecuteCall(call_id="c3", name="open_page", arguments={"url": "nope"})
    )
    assert not_a_url.is_error and "at `arguments.url`" in not_a_url.error.message


class Color(enum.Enum):
    RED = "red"


class Event(BaseModel):
    model_config = ConfigDict(strict=True)

    when: datetime.datetime
    color: Color
    id: uuid.UUID


def test_a_strict_model_takes_json_values_for_its_datetimes_enums_and_uuids(
    system: ToolSystem,
) -> None:
    @tool
    def log(event: Event) -> str:
        """Log an event."""
        assert isinstance(event.when, datetime.datetime) and event.color is Color.RED
        return str(event.id)

    system.tools.register(log)
    event = {"when": "2024-05-01T10:00:00Z", "color": "red", "id": str(uuid.UUID(int=7))}
    logged = system.execute(ExecuteCall(call_id="c1", name="log", arguments={"event": event}))
    assert not logged.is_error, logged.content
    assert logged.value == str(uuid.UUID(int=7))
    lax = system.execute(
        ExecuteCall(call_id="c2", name="log", arguments={"event": {**event, "color": 1}})
    )
    assert lax.is_error and "at `color`" in lax.error.message


def test_a_pydantic_type_whose_package_is_missing_is_refused_naming_it() -> None:
    import importlib.util

    from pydantic import EmailStr

    if importlib.util.find_spec("email_validator") is not None:
        pytest.skip("email-validator is installed here")

    def mail(to: EmailStr | None) -> str:
        return str(to)

    with pytest.raises(TypeError) as raised:
        tool(mail)
    message = str(raised.value)
    assert "parameter 'to' has an unsupported annotation" in message
    assert "pydantic.networks.EmailStr" in message
    assert "email-validator is not installed" in message


def test_a_field_default_on_a_union_of_models_is_read_by_pydantic(system: ToolSystem) -> None:
    @tool
    def pick(pet: Cat | Dog | None = Field(default=None, discriminator="kind")) -> str:  # noqa: B008
        """Pick a pet."""
        return type(pet).__name__

    assert thaw(pick.parameters)["properties"]["pet"]["default"] is None
    system.tools.register(pick)
    assert system.execute(ExecuteCall(call_id="c1", name="pick", arguments={})).value == "NoneType"
    picked = system.execute(
        ExecuteCall(call_id="c2", name="pick", arguments={"pet": {"kind": "cat"}})
    )
    assert picked.value == "Cat"


def _resolved(parameters: Any, schema: Any) -> Any:
    """``schema`` with a ``$ref`` into the parameters' ``$defs`` followed."""
    while "$ref" in schema:
        schema = parameters["$defs"][schema["$ref"].removeprefix("#/$defs/")]
    return schema


class Status(enum.Enum):
    OPEN = "open"
    DONE = "done"


class Task(BaseModel):
    title: str
    status: Status


def test_an_enum_both_in_a_model_and_a_parameter_of_its_own_builds_one_tool(
    system: ToolSystem,
) -> None:
    @tool
    def move(task: Task, to: Status) -> str:
        """Move a task to a status."""
        return f"{task.title}: {task.status.value} -> {to.value}"

    parameters = thaw(move.parameters)
    task_schema = _resolved(parameters, parameters["properties"]["task"])
    for status in (task_schema["properties"]["status"], parameters["properties"]["to"]):
        assert sorted(_resolved(parameters, status)["enum"]) == ["done", "open"]
    system.tools.register(move)
    arguments = {"task": {"title": "docs", "status": "open"}, "to": "done"}
    moved = system.execute(ExecuteCall(call_id="c1", name="move", arguments=arguments))
    assert moved.value == "docs: open -> done"


# Two enums named alike, as two modules of one project each declare their own ``Kind``.
FileKind = enum.Enum("Kind", {"TEXT": "text", "BINARY": "binary"})
UserKind = enum.Enum("Kind", {"ADMIN": "admin", "GUEST": "guest"})


class FileInfo(BaseModel):
    kind: FileKind  # type: ignore[valid-type]


class UserInfo(BaseModel):
    kind: UserKind  # type: ignore[valid-type]


def test_two_models_whose_nested_types_share_a_name_each_show_their_own(
    system: ToolSystem,
) -> None:
    @tool
    def share(file: FileInfo, user: UserInfo, cc: list[UserInfo] | None = None) -> str:
        """Share a file with a user."""
        return f"{file.kind.value} with {user.kind.value}"

    parameters = thaw(share.parameters)
    # Each shape once, however often a model appears.
    assert sorted(parameters["$defs"]) == ["FileInfo", "Kind", "Kind_2", "UserInfo"]
    kinds = {}
    for name in ("file", "user"):
        model = _resolved(parameters, parameters["properties"][name])
        kinds[name] = sorted(_resolved(parameters, model["properties"]["kind"])["enum"])
    assert kinds == {"file": ["binary", "text"], "user": ["admin", "guest"]}
    [exported] = to_openai_tools(
        [{"name": "share", "description": "", "parameters": share.parameters}], strict=True
    )
    strict_parameters = exported["function"]["parameters"]
    user = _resolved(strict_parameters, strict_parameters["properties"]["user"])
    assert sorted(_resolved(strict_parameters, user["properties"]["kind"])["enum"]) == [
        "admin",
        "guest",
    ]
    system.tools.register(share)
    arguments = {"file": {"kind": "text"}, "user": {"kind": "guest"}}
    shared = system.execute(ExecuteCall(call_id="c1", name="share", arguments=arguments))
    assert shared.value == "text with guest"


class Reading(BaseModel):
    value: float
    unit: str | None = None

    # pydantic's idiom for leaving unset fields out of every dump: keys the result may lack.
    @model_serializer(mode="wrap")
    def _without_nones(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        return {key: value for key, value in handler(self).items() if value is not None}


class Station(BaseModel):
    name: str
    reading: Reading
    online: bool = True


def test_a_result_model_whose_serializer_drops_keys_keeps_them_optional(
    system: ToolSystem,
) -> None:
    @tool
    def station() -> Station:
        """The station's reading."""
        return Station(name="north", reading=Reading(value=1.5))

    schema = thaw(station.output.schema)
    # Its own fields are always written, its default one included.
    assert sorted(schema["required"]) == ["name", "online", "reading"]
    # The serializer may leave out a field: only what the model itself requires is required.
    reading = _resolved(schema, schema["properties"]["reading"])
    assert reading["required"] == ["value"]
    system.tools.register(station)
    result = system.execute(ExecuteCall(call_id="c1", name="station", arguments={}))
    assert not result.is_error, result.content
    assert result.value == {"name": "north", "reading": {"value": 1.5}, "online": True}


def test_a_struct_field_whose_default_is_a_model_shows_the_model_data() -> None:
    import msgspec

    class Delivery(msgspec.Struct):
        to: Address = Address(city="Oslo")

    @tool
    def deliver(delivery: Delivery) -> str:
        """Deliver.

        Args:
            delivery: Where to.
        """
        return delivery.to.city

    schema = thaw(deliver.parameters)
    default = schema["$defs"]["Delivery"]["properties"]["to"]["default"]
    assert default == Address(city="Oslo").model_dump(mode="json", by_alias=True)
    with ToolSystem.start(code_runtime=None) as system:
        system.tools.register(deliver)
        result = system.execute(
            ExecuteCall(call_id="c1", name="deliver", arguments={"delivery": {}})
        )
        assert not result.is_error, result.content
        assert result.value == "Oslo"
