// Lint: typescript-eslint strict over the TypeScript sources; generated output is ignored.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'dist/**',
      'client/dist/**',
      'node_modules/**',
      '.harper-data/**',
      'test-artifacts/**',
      'bench/results/**',
    ],
  },
  ...tseslint.configs.strict,
  {
    files: ['**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-extraneous-class': 'off',
    },
  },
);
