// add-annotation: a mimeo transform plugin in JavaScript (componentize-js).
//
// Adds one annotation to `metadata.annotations` of every copy. Config:
//
//     {"key": "example.com/tenant", "value": "{{target.namespace}}"}
//
// `key` is required, non-empty and must not start with `mimeo.dev/` (mimeo's own annotations);
// `value` defaults to "" and may contain `{{target.namespace}}`, replaced with the namespace the
// copy is going to, and `{{inputs}}`, replaced with the names of the context's inputs joined by
// `,` (empty when there are none). When the annotation already has that value the copy is left
// `unchanged`.
//
// Bindings: an import of `mimeo:transform/log@0.2.0` is a module of that name; the export
// `transformer` is an object with one method per function (kebab-case names become camelCase).
// A function returning `result<T, string>` returns T for `ok` and throws a string for `err`.

import { log } from 'mimeo:transform/log@0.2.0';

const NAME = 'add-annotation-javascript';
const VERSION = '0.1.0';
const RESERVED_PREFIX = 'mimeo.dev/';
const TEMPLATE = '{{target.namespace}}';
const INPUTS = '{{inputs}}';

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Returns {key, value} or throws the message the rule's status shows. */
function parseConfig(config) {
  let parsed;
  try {
    parsed = JSON.parse(config);
  } catch (e) {
    throw `config is not valid JSON: ${e.message}`;
  }
  if (!isObject(parsed)) throw 'config must be a JSON object';
  const { key } = parsed;
  let { value } = parsed;
  if (key === undefined || key === null) throw 'config.key is required';
  if (typeof key !== 'string') throw 'config.key must be a string';
  if (key === '') throw 'config.key must not be empty';
  if (key.startsWith(RESERVED_PREFIX)) {
    throw `config.key must not start with ${RESERVED_PREFIX} (mimeo's own annotations)`;
  }
  if (value === undefined || value === null) value = '';
  if (typeof value !== 'string') throw 'config.value must be a string';
  return { key, value };
}

function describeSource(ctx) {
  const { kind, namespace, name } = ctx.source;
  return `${kind} ${namespace === undefined ? name : `${namespace}/${name}`}`;
}

/**
 * Wraps an export so that an `Error` it throws (a TypeError from a mistake, a SyntaxError) leaves
 * as a string, the only thing componentize-js turns into a `result`'s err: thrown as it is, the
 * binding aborts and the message is lost.
 */
const errorsAsStrings = (f) =>
  function (...args) {
    try {
      return f.apply(this, args);
    } catch (e) {
      throw e instanceof Error ? `${e.name}: ${e.message}` : e;
    }
  };

const exports = {
  describe() {
    return {
      name: NAME,
      version: VERSION,
      description:
        'Adds one annotation (key and value from the config; {{target.namespace}} and ' +
        '{{inputs}} in the value are replaced) to every copy. Written in JavaScript.',
      kinds: [],
    };
  },

  validateConfig(config) {
    parseConfig(config);
  },

  transform(ctx, object) {
    const { key, value: configured } = parseConfig(ctx.config);
    let value = configured;

    if (value.includes(TEMPLATE)) {
      // option<string> arrives as undefined (none) or a string (some).
      if (ctx.target.namespace === undefined) {
        throw `config.value uses ${TEMPLATE} but the target has no namespace (cluster-scoped)`;
      }
      value = value.split(TEMPLATE).join(ctx.target.namespace);
    }
    // list<input> arrives as an array of records.
    value = value.split(INPUTS).join(ctx.inputs.map((input) => input.name).join(','));

    let obj;
    try {
      obj = JSON.parse(object);
    } catch (e) {
      throw `object is not valid JSON: ${e.message}`;
    }
    if (!isObject(obj)) throw 'object must be a JSON object';
    const metadata = obj.metadata;
    if (!isObject(metadata)) throw 'object.metadata must be an object';
    if (metadata.annotations === undefined || metadata.annotations === null) {
      metadata.annotations = {};
    } else if (!isObject(metadata.annotations)) {
      throw 'metadata.annotations must be an object';
    }
    const annotations = metadata.annotations;

    if (Object.hasOwn(annotations, key) && annotations[key] === value) {
      log('info', `annotation ${key} already set on the copy of ${describeSource(ctx)}`);
      return { tag: 'unchanged' };
    }

    // defineProperty rather than `annotations[key] = value`: a key such as `__proto__` would
    // otherwise change the object's prototype instead of adding an annotation.
    Object.defineProperty(annotations, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
    log('info', `set annotation ${key} on the copy of ${describeSource(ctx)}`);
    return { tag: 'write', val: JSON.stringify(obj) };
  },
};

// describe returns no result, so it has no err to throw into; the other two are wrapped.
export const transformer = {
  describe: exports.describe,
  validateConfig: errorsAsStrings(exports.validateConfig),
  transform: errorsAsStrings(exports.transform),
};
