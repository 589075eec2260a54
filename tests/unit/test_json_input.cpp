// Tests of user-JSON reading: parse errors with line:column, and JsonObjectReader's field paths, checks and messages.
#include <doctest/doctest.h>

#include "test_support.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <unistd.h>

#include "errors.h"
#include "json_input.h"

namespace {

using nlohmann::json;
using shardplan::InputError;
using shardplan::JsonObjectReader;
using shardplan::parse_json_text;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using shardplan::testing::input_error_message;

std::string parse_error(const std::string& text, const std::string& origin = "f.json") {
  return input_error_message([&] { parse_json_text(text, origin); });
}

// A file under the temp directory, removed when the test ends.
class TemporaryFile {
 public:
  TemporaryFile(const std::string& stem, const std::string& contents) {
    static int counter = 0;
    path_ = (std::filesystem::temp_directory_path() /
             (stem + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".json"))
                .string();
    std::ofstream(path_, std::ios::binary) << contents;
  }
  ~TemporaryFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("parse_json_text returns the document for valid text") {
  const json document = parse_json_text(R"({"a": [1, 2, {"b": null}], "c": "x"})", "f.json");
  CHECK(document.at("a").size() == 3);
  CHECK(document.at("c") == "x");
  CHECK(document.at("a").at(2).at("b").is_null());
}

TEST_CASE("parse_json_text: an error on line 1 names origin, line and column") {
  const std::string message = parse_error("{]", "model.json");
  CHECK(message.rfind("model.json:1:2: malformed JSON: ", 0) == 0);
  CHECK(contains(message, "unexpected ']'"));
}

TEST_CASE("parse_json_text: an error on line 3 points at the offending byte") {
  // Line 3 is `  "b": ]`; the ']' is its 8th character.
  const std::string message = parse_error("{\n  \"a\": 1,\n  \"b\": ]\n}");
  CHECK(message.rfind("f.json:3:8: malformed JSON: ", 0) == 0);
  CHECK(contains(message, "unexpected ']'"));
  // Line 3 is `  "name": "x",, `: the second comma is the 15th character.
  CHECK(parse_error("{\n  \"schema\": \"shardplan.model/v1\",\n  \"name\": \"x\",, \n}").rfind("f.json:3:15:", 0) == 0);
  // Columns restart after every newline: the ',' before ']' is the 1st character of line 3.
  CHECK(parse_error("[1,\n2\n,]").rfind("f.json:3:2:", 0) == 0);
}

TEST_CASE("parse_json_text: input that ends right after a newline points at the start of the next line") {
  CHECK(parse_error("{\"a\": 1,\n").rfind("f.json:2:1:", 0) == 0);
  CHECK(parse_error("{\"a\": 1,\n\n").rfind("f.json:3:1:", 0) == 0);
  CHECK(contains(parse_error("{\"a\": 1,\n"), "unexpected end of input"));
}

TEST_CASE("parse_json_text: empty text and trailing garbage") {
  const std::string empty = parse_error("");
  CHECK(empty.rfind("f.json:1:1: malformed JSON: ", 0) == 0);
  CHECK(contains(empty, "unexpected end of input"));
  const std::string trailing = parse_error("{\"a\":1}\n}");
  CHECK(trailing.rfind("f.json:2:1:", 0) == 0);
  CHECK(contains(trailing, "expected end of input"));
}

TEST_CASE("parse_json_text: an invalid literal keeps nlohmann's explanation, not just the last bytes read") {
  // nlohmann says "syntax error while parsing value - invalid literal; last read: 'tru'"; the reason must survive.
  const std::string message = parse_error("tru");
  CHECK(message.rfind("f.json:1:4: malformed JSON: ", 0) == 0);
  CHECK(contains(message, "invalid literal"));
  // When the bytes last read contain ": " themselves the explanation must not be cut inside them.
  const std::string inside = parse_error("{\"a\": tru}");
  CHECK(inside.rfind("f.json:1:10: malformed JSON: ", 0) == 0);
  CHECK(contains(inside, "invalid literal"));
}

TEST_CASE("parse_json_text: a number too large for a double is an InputError naming the origin") {
  // nlohmann throws out_of_range.406 ("number overflow parsing '1e400'"), not parse_error, for these.
  for (const char* text : {"{\"dropout\": 1e400}", "[-1e999]", "{\"a\": 1,\n \"b\": 2E400}"}) {
    CAPTURE(text);
    const std::string message = parse_error(text, "big.json");
    CHECK(message.rfind("big.json:", 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("parse_json_text: every error is exactly one line") {
  for (const std::string& text : {std::string("{]"), std::string("\n\n  x"), std::string("{\"a\": tru}"),
                                 std::string("[1,\n2\n,]"), std::string("{\"a\":\"\x01\"}")}) {
    CAPTURE(text);
    CHECK(parse_error(text).find('\n') == std::string::npos);
  }
}

TEST_CASE("read_json_file names the file when it is missing or malformed") {
  const std::string missing = "/nonexistent-shardplan-dir/model.json";
  CHECK(input_error_message([&] { shardplan::read_json_file(missing); }) == missing + ": cannot open file for reading");
  const TemporaryFile bad("json-input-bad", "{\n  \"a\": 1\n  \"b\": 2\n}\n");
  const std::string message = input_error_message([&] { shardplan::read_json_file(bad.path()); });
  // The missing ',' is noticed at the string "b" on line 3; nlohmann reports the token's last byte (column 5).
  CHECK(message.rfind(bad.path() + ":3:5: malformed JSON: ", 0) == 0);
  CHECK(contains(message, "expected '}'"));
  const TemporaryFile good("json-input-good", "{\"x\": [1, 2, 3]}");
  CHECK(shardplan::read_json_file(good.path()).at("x").size() == 3);
  CHECK(shardplan::read_text_file(good.path()) == "{\"x\": [1, 2, 3]}");
}

TEST_CASE("JsonObjectReader refuses a value that is not an object, naming document or field") {
  const json array = json::array({1, 2});
  CHECK(input_error_message([&] { JsonObjectReader(array, "m.json"); }) ==
        "m.json: document: expected a JSON object, got [1,2]");
  const json number = 5;
  CHECK(input_error_message([&] { JsonObjectReader(number, "m.json", "layers[1]"); }) ==
        "m.json: field 'layers[1]': expected a JSON object, got 5");
}

TEST_CASE("JsonObjectReader: missing fields and dotted field paths") {
  const json document = json::parse(R"({"architecture": {"vocab_size": 10},
                                        "layers": [{"params": 1}, {"params": 2}, {"params": -5}, 7]})");
  const JsonObjectReader root(document, "model.json");
  CHECK(root.field_path("layers") == "layers");
  CHECK(input_error_message([&] { root.positive_int("hidden_size"); }) ==
        "model.json: missing field 'hidden_size' (expected a positive integer)");

  const JsonObjectReader architecture = root.object("architecture");
  CHECK(architecture.path() == "architecture");
  CHECK(architecture.origin() == "model.json");
  CHECK(architecture.positive_int("vocab_size") == 10);
  CHECK(input_error_message([&] { architecture.positive_int("hidden_size"); }) ==
        "model.json: missing field 'architecture.hidden_size' (expected a positive integer)");

  const auto layers = root.array("layers");
  REQUIRE(layers.size() == 4);
  const JsonObjectReader third = root.element("layers", 2, layers[2]);
  CHECK(third.path() == "layers[2]");
  CHECK(third.field_path("params") == "layers[2].params");
  CHECK(input_error_message([&] { third.positive_int("params"); }) ==
        "model.json: field 'layers[2].params': expected a positive integer, got -5");
  CHECK(input_error_message([&] { root.element("layers", 3, layers[3]); }) ==
        "model.json: field 'layers[3]': expected a JSON object, got 7");
  // A nested reader of a nested reader extends the path again.
  const json nested = json::parse(R"({"layers": [{"tensors": [{"shape": "x"}]}]})");
  const JsonObjectReader outer(nested, "n.json");
  // element() keeps a reference to the value, so the arrays must outlive the readers.
  const auto layer_values = outer.array("layers");
  const JsonObjectReader layer = outer.element("layers", 0, layer_values[0]);
  const auto tensor_values = layer.array("tensors");
  const JsonObjectReader tensor = layer.element("tensors", 0, tensor_values[0]);
  CHECK(input_error_message([&] { tensor.array("shape"); }) ==
        "n.json: field 'layers[0].tensors[0].shape': expected a non-empty array, got \"x\"");
}

TEST_CASE("JsonObjectReader::object requires an object-valued field") {
  const json document = json::parse(R"({"architecture": [1]})");
  const JsonObjectReader root(document, "m.json");
  CHECK(input_error_message([&] { root.object("architecture"); }) ==
        "m.json: field 'architecture': expected a JSON object, got [1]");
  CHECK(input_error_message([&] { root.object("catalog"); }) ==
        "m.json: missing field 'catalog' (expected a JSON object)");
}

TEST_CASE("reject_unknown_keys names the unknown key with its path and suggests the close one") {
  const json document = json::parse(R"({"architecture": {"hiden_size": 64, "vocab_size": 10}})");
  const JsonObjectReader root(document, "m.json");
  CHECK_NOTHROW(root.reject_unknown_keys({"architecture", "name"}));
  const JsonObjectReader architecture = root.object("architecture");
  CHECK(input_error_message([&] { architecture.reject_unknown_keys({"vocab_size", "hidden_size", "num_layers"}); }) ==
        "m.json: unknown field 'architecture.hiden_size' (did you mean 'hidden_size'?)");
  // Keys are compared exactly: "Vocab_size" is not "vocab_size".
  const json upper = json::parse(R"({"Vocab_size": 10})");
  CHECK(input_error_message([&] { JsonObjectReader(upper, "u.json").reject_unknown_keys({"vocab_size"}); }) ==
        "u.json: unknown field 'Vocab_size' (did you mean 'vocab_size'?)");
}

TEST_CASE("positive_int accepts integers >= 1 and rejects 0, -1, 1.5, \"3\", true, null and huge unsigned values") {
  const json document = json::parse(R"({"one": 1, "seven": 7, "zero": 0, "minus": -1, "fraction": 1.5, "text": "3",
                                        "flag": true, "nothing": null, "float_three": 3.0,
                                        "huge": 18446744073709551615, "max": 9223372036854775807})");
  const JsonObjectReader reader(document, "p.json");
  CHECK(reader.positive_int("one") == 1);
  CHECK(reader.positive_int("seven") == 7);
  CHECK(reader.positive_int("max") == std::numeric_limits<std::int64_t>::max());
  CHECK(input_error_message([&] { reader.positive_int("zero"); }) ==
        "p.json: field 'zero': expected a positive integer, got 0");
  CHECK(input_error_message([&] { reader.positive_int("minus"); }) ==
        "p.json: field 'minus': expected a positive integer, got -1");
  CHECK(input_error_message([&] { reader.positive_int("fraction"); }) ==
        "p.json: field 'fraction': expected a positive integer, got 1.5");
  CHECK(input_error_message([&] { reader.positive_int("text"); }) ==
        "p.json: field 'text': expected a positive integer, got \"3\"");
  CHECK(contains(input_error_message([&] { reader.positive_int("flag"); }), "got true"));
  CHECK(contains(input_error_message([&] { reader.positive_int("nothing"); }), "got null"));
  CHECK(contains(input_error_message([&] { reader.positive_int("float_three"); }), "expected a positive integer"));
  CHECK(contains(input_error_message([&] { reader.positive_int("huge"); }), "got 18446744073709551615"));
}

TEST_CASE("optional fields: absent gives nullopt or the fallback, present is checked like the required form") {
  const json document = json::parse(R"({"n": 4, "bad_n": 0, "s": "abc", "empty": "", "x": 2.5, "neg": -0.5,
                                        "b": false, "not_bool": 1, "count": 0, "neg_count": -3})");
  const JsonObjectReader reader(document, "o.json");
  CHECK(reader.optional_positive_int("absent") == std::nullopt);
  CHECK(reader.optional_positive_int("n") == std::optional<std::int64_t>(4));
  CHECK(input_error_message([&] { reader.optional_positive_int("bad_n"); }) ==
        "o.json: field 'bad_n': expected a positive integer, got 0");

  CHECK(reader.optional_string("absent") == std::nullopt);
  CHECK(reader.optional_string("s") == std::optional<std::string>("abc"));
  CHECK(input_error_message([&] { reader.optional_string("empty"); }) ==
        "o.json: field 'empty': expected a non-empty string, got \"\"");
  CHECK(input_error_message([&] { reader.string("n"); }) == "o.json: field 'n': expected a non-empty string, got 4");
  CHECK(input_error_message([&] { reader.string("absent"); }) ==
        "o.json: missing field 'absent' (expected a string)");

  CHECK(reader.optional_positive_number("absent") == std::nullopt);
  CHECK(reader.optional_positive_number("x") == std::optional<double>(2.5));
  CHECK(reader.positive_number("n") == 4.0);  // an integer is a number
  CHECK(input_error_message([&] { reader.positive_number("count"); }) ==
        "o.json: field 'count': expected a positive number, got 0");
  CHECK(contains(input_error_message([&] { reader.positive_number("s"); }), "expected a positive number"));

  CHECK(reader.non_negative_number("absent", 0.25) == 0.25);
  CHECK(reader.non_negative_number("count", 9.0) == 0.0);
  CHECK(input_error_message([&] { reader.non_negative_number("neg", 0); }) ==
        "o.json: field 'neg': expected a non-negative number, got -0.5");

  CHECK(reader.non_negative_int("absent", 17) == 17);
  CHECK(reader.non_negative_int("count", 17) == 0);
  CHECK(input_error_message([&] { reader.non_negative_int("neg_count", 0); }) ==
        "o.json: field 'neg_count': expected a non-negative integer, got -3");
  CHECK(contains(input_error_message([&] { reader.non_negative_int("x", 0); }), "expected a non-negative integer"));

  CHECK(reader.boolean("absent", true) == true);
  CHECK(reader.boolean("b", true) == false);
  CHECK(input_error_message([&] { reader.boolean("not_bool", false); }) ==
        "o.json: field 'not_bool': expected true or false, got 1");
}

TEST_CASE("array: required, an array, and non-empty unless allowed") {
  const json document = json::parse(R"({"list": [1, 2], "empty": [], "scalar": 3})");
  const JsonObjectReader reader(document, "a.json");
  CHECK(reader.array("list").size() == 2);
  CHECK(reader.array("empty", true).empty());
  CHECK(input_error_message([&] { reader.array("empty"); }) ==
        "a.json: field 'empty': expected a non-empty array, got []");
  CHECK(input_error_message([&] { reader.array("scalar", true); }) == "a.json: field 'scalar': expected an array, got 3");
  CHECK(input_error_message([&] { reader.array("absent"); }) == "a.json: missing field 'absent' (expected an array)");
}

TEST_CASE("fail names origin, path and expectation, with the value only when present") {
  const json document = json::parse(R"({"kind": "blok"})");
  const JsonObjectReader reader(document, "k.json", "layers[0]");
  CHECK(input_error_message([&] { reader.fail("kind", "one of a, b"); }) ==
        "k.json: field 'layers[0].kind': expected one of a, b, got \"blok\"");
  CHECK(input_error_message([&] { reader.fail("tensors", "'tensors' or 'params'"); }) ==
        "k.json: field 'layers[0].tensors': expected 'tensors' or 'params'");
}

TEST_CASE("describe_json_value renders short values whole and long ones cut to 40 characters") {
  CHECK(shardplan::describe_json_value(json(42)) == "42");
  CHECK(shardplan::describe_json_value(json("abc")) == "\"abc\"");
  CHECK(shardplan::describe_json_value(json(nullptr)) == "null");
  const std::string long_text(100, 'a');
  const std::string rendered = shardplan::describe_json_value(json(long_text));
  CHECK(rendered.size() == 40);
  CHECK(rendered == "\"" + std::string(36, 'a') + "...");
}
