// ESLint (flat config) with typescript-eslint's recommended rules; formatting is prettier's.
import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "dist-test/", "node_modules/"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ["bench/**/*.ts"],
    rules: { "@typescript-eslint/no-require-imports": "off" },
  },
);
